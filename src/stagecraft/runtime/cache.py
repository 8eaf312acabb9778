"""Executable serialization and the persistent (on-disk) compilation cache.

Serialized executables are the PJRT runtime's own bytes (`client.serialize_executable`)
wrapped in a stagecraft header, so a reader can tell what it holds before handing any bytes
to the runtime::

  magic          8 bytes   b"SCEXEC\\x00\\x01"
  sizes          16 bytes  big-endian: format version (u16), jaxlib version length (u16),
                           metadata length (u32), payload length (u64)
  jaxlib version UTF-8 text
  metadata       JSON (UTF-8): {"meta": <caller's dict>, "devices": [...], ...}
  checksum       32 bytes  SHA-256 of everything above it followed by the payload
  payload        the runtime's serialized executable

Nothing is ever unpickled: the metadata is JSON and the payload goes only to the runtime's
deserializer after its checksum matched. A cache entry whose header or checksum does not
match is removed and the program recompiled.

The cache directory is `stagecraft.config.compilation_cache_dir` (env
`STAGECRAFT_COMPILATION_CACHE_DIR`); `dispatch.compile_module` consults it on every in-memory
miss. Entries are written to a temporary file in the same directory and moved into place with
`os.replace`, so readers never see a partial file and two processes storing the same key both
succeed (the last rename wins; both wrote the same program).

Trust model: whoever can write the directory decides nothing. An entry is loaded only when it
is a regular file (not a link, FIFO or device) of bounded size whose header, checksum and
recorded key (the SHA-256 of the program text, compile options, devices, platform and
versions) equal the key being looked up; anything else is a miss (one warning per entry), so a
foreign, copied or tampered entry makes the program recompile, never run another program.
The checksum guards against damage, not against a writer who re-checksums: the key check is
what binds an entry to its program. Entries are not secret (mode 0644).

Size bound: `config.compilation_cache_max_size` (bytes; env
`STAGECRAFT_COMPILATION_CACHE_MAX_SIZE`; -1, the default, is unbounded). After each write
the least recently used entries (by modification time, refreshed on every hit) are removed
until the directory's entries fit; an entry another process removes concurrently is simply
a miss for it.
"""
from __future__ import annotations

import hashlib
import json
import os
import stat
import struct
import tempfile
import threading
import warnings
from typing import Any, Sequence

import jaxlib

from stagecraft.runtime import client, mlir_text

__all__ = ["seal", "unseal", "SealError", "entry_signature", "check_signature", "header_of", "FORMAT_VERSION", "JAXLIB_VERSION", "stats", "reset_stats",
           "CorruptExecutableError", "VersionMismatchError", "serialize_executable",
           "deserialize_executable", "cache_key", "MAX_ENTRY_BYTES", "lookup", "evict", "store"]

#: The version of the header layout below; bump it when the layout changes.
FORMAT_VERSION = 2
#: The jaxlib that wrote (and may read) the runtime payload.
JAXLIB_VERSION: str = jaxlib.__version__

_MAGIC = b"SCEXEC\x00\x01"
_SIZES = struct.Struct(">HHIIQ")   # see `seal`: version, 2 sections (jaxlib version, meta)
_DIGEST = 32
_SUFFIX = ".scexe"

#: Counters of the persistent cache in this process (tests and benchmarks read them):
#: hits, misses (no entry), writes, corrupt (entries dropped), errors (I/O failures).
#: Counters since the last `reset_stats()`: disk hits and misses, entries written, corrupt
#: entries dropped, I/O errors, entries evicted by the size bound, and foreign entries
#: ignored (not a regular file, or another program's).
stats: dict[str, int] = {"hits": 0, "misses": 0, "writes": 0, "corrupt": 0, "errors": 0,
                         "evictions": 0, "foreign": 0}
_stats_lock = threading.Lock()


def reset_stats() -> None:
  """Sets every counter of `stats` back to 0."""
  with _stats_lock:
    for k in stats:
      stats[k] = 0


def _count(name: str) -> None:
  with _stats_lock:
    stats[name] += 1


class CorruptExecutableError(ValueError):
  """Serialized executable bytes that are truncated, damaged, or not ours."""


class VersionMismatchError(ValueError):
  """Serialized executable bytes written by another header format or jaxlib version."""


# ---------------------------------------------------------------------------
# The byte format


def _sizes(n: int) -> struct.Struct:
  return struct.Struct(f">HH{n}IQ")   # format version, n, n section sizes, payload size


class SealError(ValueError):
  """Sealed bytes (see `seal`) that fail a check; `kind` names it: "magic", "truncated",
  "version" (`found` is the format version they carry), "length" (`found` is the length
  their header announces) or "checksum"."""

  def __init__(self, kind: str, found: int | None = None):
    super().__init__(kind if found is None else f"{kind} {found}")
    self.kind, self.found = kind, found


def seal(magic: bytes, version: int, sections: Sequence[bytes], payload: bytes) -> bytes:
  """Frames `payload` with `magic`, a format `version`, small `sections` (headers) and a
  SHA-256 checksum of everything: `magic | version, n, n section sizes, payload size
  (big-endian ">HH{n}IQ") | sections | sha256 | payload`. The one framing of stagecraft's
  byte formats (serialized executables, cache entries, `export`); read with `unseal`."""
  head = (magic + _sizes(len(sections)).pack(version, len(sections), *map(len, sections),
                                             len(payload)) + b"".join(sections))
  digest = hashlib.sha256(head)
  digest.update(payload)
  return b"".join((head, digest.digest(), payload))


def unseal(data: bytes, magic: bytes, version: int) -> tuple[list[bytes], bytes]:
  """The (sections, payload) of bytes made by `seal(magic, version, ...)`.

  Raises:
    SealError: another magic, truncated or padded bytes, another format version, or a
      checksum that does not match (callers turn it into their own exception).
  """
  n0 = len(magic)
  if data[:n0] != magic:
    raise SealError("magic")
  if len(data) < n0 + 4:
    raise SealError("truncated")
  fmt, n = struct.unpack_from(">HH", data, n0)
  if fmt != version:
    raise SealError("version", fmt)
  sizes = _sizes(n)
  if len(data) < n0 + sizes.size:
    raise SealError("truncated")
  *lens, npay = sizes.unpack_from(data, n0)[2:]
  off = n0 + sizes.size
  expected = off + sum(lens) + _DIGEST + npay
  if len(data) != expected:
    raise SealError("length", expected)
  sections = []
  for n_bytes in lens:
    sections.append(data[off:off + n_bytes])
    off += n_bytes
  digest, payload = data[off:off + _DIGEST], data[off + _DIGEST:]
  h = hashlib.sha256(data[:off])
  h.update(payload)
  if h.digest() != digest:
    raise SealError("checksum")
  return sections, payload


def _pack(payload: bytes, header: dict, jaxlib_version: str | None = None,
          format_version: int | None = None) -> bytes:
  ver = (JAXLIB_VERSION if jaxlib_version is None else jaxlib_version).encode()
  fmt = FORMAT_VERSION if format_version is None else format_version
  meta = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
  return seal(_MAGIC, fmt, (ver, meta), payload)


def _unpack(data: bytes) -> tuple[dict, bytes]:
  """(header dict, payload) of `data`.

  Raises:
    CorruptExecutableError: bad magic, truncated data, bad checksum or bad metadata.
    VersionMismatchError: another format version or jaxlib version wrote `data`.
  """
  if not isinstance(data, (bytes, bytearray, memoryview)):
    raise TypeError(f"expected the bytes of a serialized executable, got "
                    f"{type(data).__name__}.")
  data = bytes(data)
  try:
    (ver, meta_bytes), payload = unseal(data, _MAGIC, FORMAT_VERSION)
  except SealError as e:
    if e.kind == "magic":
      raise CorruptExecutableError(
          f"these {len(data)} bytes are not a stagecraft serialized executable (they do not "
          f"start with the magic {_MAGIC!r}); pass bytes made by serialize_executable or "
          f"Compiled.serialize().") from None
    if e.kind == "version":
      raise VersionMismatchError(
          f"cannot load this serialized executable: it has stagecraft format version "
          f"{e.found}, but this stagecraft reads format version {FORMAT_VERSION}. Recompile "
          f"the function (and serialize it again) with this version.") from None
    if e.kind == "truncated":
      raise CorruptExecutableError(f"serialized executable truncated: {len(data)} bytes, "
                                   f"shorter than its header.") from None
    if e.kind == "length":
      raise CorruptExecutableError(
          f"serialized executable has {len(data)} bytes but its header announces {e.found} "
          f"(truncated or padded).") from None
    raise CorruptExecutableError("serialized executable is damaged: its SHA-256 checksum "
                                 "does not match its contents.") from None
  ver = ver.decode("utf-8", "replace")
  if ver != JAXLIB_VERSION:
    raise VersionMismatchError(
        f"cannot load this serialized executable: it was written by jaxlib {ver}, but this "
        f"process runs jaxlib {JAXLIB_VERSION}; executables only load in the jaxlib version "
        f"that compiled them. Recompile the function (and serialize it again) here.")
  try:
    header = json.loads(meta_bytes.decode("utf-8"))
  except (UnicodeDecodeError, json.JSONDecodeError) as e:  # pragma: no cover (checksummed)
    raise CorruptExecutableError(f"serialized executable metadata unreadable: {e}") from None
  if not isinstance(header, dict):  # pragma: no cover
    raise CorruptExecutableError("serialized executable metadata is not a JSON object.")
  return header, payload


# ---------------------------------------------------------------------------
# Public serialization API


def serialize_executable(exe: Any, meta: dict | None = None) -> bytes:
  """The bytes of a compiled executable and `meta`, loadable by `deserialize_executable`.

  Args:
    exe: a runtime LoadedExecutable (from `dispatch.compile_module`).
    meta: a dict of JSON-able values (str keys; str, int, float, bool, None, lists, dicts)
      stored alongside, e.g. input/output avals and tree descriptions for a Compiled.

  Returns:
    bytes: header (magic, format version, jaxlib version, lengths, SHA-256) + payload.

  Raises:
    TypeError: if `meta` is not a dict of JSON-able values.
  """
  meta = {} if meta is None else meta
  if not isinstance(meta, dict):
    raise TypeError(f"serialize_executable: meta must be a dict of JSON-able values, got "
                    f"{type(meta).__name__}.")
  devs = list(exe.local_devices())
  header = {"meta": meta, "devices": [d.id for d in devs],
            "platform": devs[0].platform if devs else None,
            "device_kind": devs[0].device_kind if devs else None}
  try:
    json.dumps(header)
  except (TypeError, ValueError) as e:
    raise TypeError(f"serialize_executable: meta must hold only JSON-able values "
                    f"(str, int, float, bool, None, list, dict): {e}") from None
  payload = exe.client.serialize_executable(exe)
  return _pack(payload, header)


def header_of(data: bytes) -> dict:
  """The checked header of serialized executable bytes (its `devices`, `platform`, ...).

  Raises:
    ValueError (CorruptExecutableError / VersionMismatchError): as `deserialize_executable`.
  """
  return _unpack(data)[0]


def deserialize_executable(data: bytes, devices: Sequence[Any] | None = None
                           ) -> tuple[Any, dict]:
  """Loads bytes made by `serialize_executable`, without recompiling.

  Args:
    data: the bytes.
    devices: the devices to load onto (default: the devices of this process's default
      backend with the ids the executable was compiled for).

  Returns:
    (exe, meta): the runtime LoadedExecutable and the caller's `meta` dict.

  Raises:
    ValueError (VersionMismatchError): if another stagecraft format version or jaxlib version
      wrote `data`; the message names both versions.
    ValueError (CorruptExecutableError): if `data` is truncated, damaged or not ours.
    ValueError: if the devices it was compiled for do not exist here.
  """
  header, payload = _unpack(data)
  if devices is None:
    devices = _devices_by_id(header.get("devices") or [client.default_device().id],
                             header.get("platform"))
  exe = _load(payload, tuple(devices))
  return exe, header.get("meta", {})


_HLO_TYPES = {"pred": "bool", "s8": "int8", "s16": "int16", "s32": "int32", "s64": "int64",
              "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64",
              "f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64",
              "c64": "complex64", "c128": "complex128", "f8e4m3fn": "float8_e4m3fn",
              "f8e5m2": "float8_e5m2"}


def _split_top(text: str) -> list[str]:
  out, depth, cur = [], 0, ""
  for ch in text:
    if ch in "([{":
      depth += 1
    elif ch in ")]}":
      depth -= 1
    if ch == "," and depth == 0:
      out.append(cur.strip())
      cur = ""
    else:
      cur += ch
  if cur.strip():
    out.append(cur.strip())
  return out


def _parse_shapes(text: str) -> list[tuple[str, tuple[int, ...]]]:
  text = text.strip()
  if text.startswith("(") and text.endswith(")"):
    return [s for part in _split_top(text[1:-1]) for s in _parse_shapes(part)]
  name, _, rest = text.partition("[")
  dims = rest.split("]")[0]
  shape = tuple(int(d) for d in dims.split(",") if d.strip())
  return [(_HLO_TYPES.get(name.strip(), name.strip()), shape)]


def entry_signature(exe) -> tuple[list, list]:
  """([(dtype name, shape)] of the parameters, [...] of the results) of a loaded
  executable, read from its compiled module's entry computation layout."""
  header = exe.hlo_modules()[0].to_string().split("\n", 1)[0]
  layout = header.split("entry_computation_layout={", 1)[1]
  depth, end = 1, 0
  for i, ch in enumerate(layout):
    depth += ch == "{"
    depth -= ch == "}"
    if depth == 0:
      end = i
      break
  ins, outs = layout[:end].rsplit("->", 1)
  return _parse_shapes(ins), _parse_shapes(outs)


def check_signature(exe, in_avals: Sequence[Any], out_avals: Sequence[Any], what: str) -> None:
  """Checks that a loaded executable takes and returns exactly `in_avals` / `out_avals`
  (shapes and dtypes; float0 travels as bool), so that a header that disagrees with its
  payload never makes the runtime reinterpret bits.

  Raises:
    ValueError: naming the first mismatch.
  """
  def names(avals):
    return [("bool" if a.dtype.name == "void" else a.dtype.name, tuple(a.shape))
            for a in avals]
  try:
    ins, outs = entry_signature(exe)
  except (IndexError, ValueError) as e:   # pragma: no cover (a runtime we do not know)
    raise ValueError(f"{what}: cannot read the executable's signature ({e}).") from None
  for side, have, want in (("arguments", ins, names(in_avals)),
                           ("results", outs, names(out_avals))):
    if have != want:
      fmt = lambda xs: ", ".join(f"{d}{list(s)}" for d, s in xs)
      raise ValueError(f"{what}: the executable's {side} are ({fmt(have)}) but its header "
                       f"says ({fmt(want)}); the bytes were altered or belong to another "
                       f"program. Serialize the Compiled again.")


def _devices_by_id(ids, platform):
  backend = client.get_backend(None if platform in (None, client.default_device().platform)
                               else platform)
  by_id = {d.id: d for d in backend.local_devices()}
  missing = [i for i in ids if i not in by_id]
  if missing:
    raise ValueError(f"the serialized executable was compiled for devices {list(ids)}, but "
                     f"this process has only devices {sorted(by_id)}; start the process with "
                     f"as many devices (or pass devices=...).")
  return [by_id[i] for i in ids]


def _load(payload: bytes, devs: tuple, opts=None) -> Any:
  client.check_not_forked()
  backend = devs[0].client
  return backend.deserialize_executable(payload, client.device_list(devs), opts)


# ---------------------------------------------------------------------------
# The persistent compilation cache


def cache_key(text: str, devs: Sequence[Any], num_replicas: int, num_partitions: int) -> str:
  """Hex SHA-256 of everything that changes the compiled program: the StableHLO `text`
  (without its locations, as JAX's key with `jax_compilation_cache_include_metadata_in_key`
  off: moving or renaming a program's source does not miss),
  the compile options (replicas, partitions, device assignment), the platform and device
  kind, the jaxlib version, this format version and `XLA_FLAGS`."""
  d0 = devs[0]
  h = hashlib.sha256()
  parts = (f"format={FORMAT_VERSION}", f"jaxlib={JAXLIB_VERSION}", f"platform={d0.platform}",
           f"kind={d0.device_kind}", f"platform_version={d0.client.platform_version}",
           f"replicas={num_replicas}", f"partitions={num_partitions}",
           "devices=" + ",".join(str(d.id) for d in devs),
           f"xla_flags={os.environ.get('XLA_FLAGS', '')}")
  for p in parts:
    h.update(p.encode())
    h.update(b"\x00")
  h.update(mlir_text.strip_locations(text).encode())
  return h.hexdigest()


def _entry_path(cache_dir: str, key: str) -> str:
  return os.path.join(cache_dir, key + _SUFFIX)


def _warn(msg: str) -> None:
  warnings.warn(f"stagecraft persistent compilation cache: {msg} Compiling without it.",
                RuntimeWarning, stacklevel=4)


#: Entries larger than this are never read (a bound on what a lookup may read; executables
#: of real programs are far smaller).
MAX_ENTRY_BYTES = 1 << 31
_warned: set = set()


def _warn_once(path: str, msg: str) -> None:
  if path not in _warned:
    _warned.add(path)
    warnings.warn(f"stagecraft persistent compilation cache: {msg}", RuntimeWarning,
                  stacklevel=4)


def _read_regular(path: str) -> bytes | None:
  """The bytes of `path` if it is a regular file of at most MAX_ENTRY_BYTES (not followed
  through a symlink, never blocking on a FIFO), else None (FileNotFoundError when absent)."""
  flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
  try:
    fd = os.open(path, flags)
  except OSError as e:
    if isinstance(e, FileNotFoundError):
      raise
    if os.path.islink(path):
      return None
    raise
  try:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_ENTRY_BYTES:
      return None
    chunks, left = [], st.st_size + 1   # one byte more: a file that grew is caught
    while left > 0:
      chunk = os.read(fd, min(left, 1 << 24))
      if not chunk:
        break
      chunks.append(chunk)
      left -= len(chunk)
    data = b"".join(chunks)
    return data if len(data) == st.st_size else None
  finally:
    os.close(fd)


def _drop(path: str, e: Exception) -> None:
  """A corrupt entry: counted, removed, warned about; the lookup is a miss."""
  _count("corrupt")
  _count("misses")
  _remove(path)
  warnings.warn(f"stagecraft persistent compilation cache: dropped the bad entry {path} "
                f"({e}); recompiling.", RuntimeWarning, stacklevel=4)


def lookup(cache_dir: str, key: str, devs: tuple, opts=None) -> Any | None:
  """The executable stored under `key` in `cache_dir`, or None (a miss). Only a regular
  file of bounded size whose recorded key is `key` is loaded (see the trust model above).
  A corrupt or truncated entry is removed (counted in `stats["corrupt"]`); an entry that is
  not a regular file, or records another key, is left alone and is a miss with one warning
  (`stats["foreign"]`). Never raises for a bad entry or an unreadable directory (it warns)."""
  path = _entry_path(cache_dir, key)
  try:
    data = _read_regular(path)
  except FileNotFoundError:
    _count("misses")
    return None
  except OSError as e:
    _count("errors")
    _count("misses")
    _warn(f"cannot read {path}: {e}.")
    return None
  if data is None:
    _count("foreign")
    _count("misses")
    _warn_once(path, f"ignored {path}: not a regular file of at most {MAX_ENTRY_BYTES} "
                     f"bytes; compiling without it.")
    return None
  try:
    header, payload = _unpack(data)
  except Exception as e:   # noqa: BLE001 (any bad entry is dropped, never fatal)
    return _drop(path, e)
  if header.get("key") != key:
    # NB: a well-formed entry of another program (copied or renamed): never run it; the
    # store after compiling replaces it.
    _count("foreign")
    _count("misses")
    _warn_once(path, f"ignored {path}: it holds the executable of another program (its "
                     f"recorded key differs from its name); recompiling.")
    return None
  try:
    exe = _load(payload, devs, opts)
  except Exception as e:   # noqa: BLE001
    return _drop(path, e)
  _count("hits")
  try:
    os.utime(path)   # NB: recently used, for eviction
  except OSError:
    pass
  return exe


def evict(cache_dir: str, max_size: int) -> int:
  """Removes the least recently used entries of `cache_dir` until their total size is at
  most `max_size` bytes (< 0: no bound). Returns the number removed; never raises."""
  if max_size is None or max_size < 0:
    return 0
  entries = []
  try:
    with os.scandir(cache_dir) as it:
      for e in it:
        if e.name.endswith(_SUFFIX) and not e.name.startswith(".tmp-"):
          try:
            st = e.stat(follow_symlinks=False)
          except OSError:
            continue
          entries.append((st.st_mtime, st.st_size, e.path))
  except OSError:
    return 0
  total = sum(size for _, size, _ in entries)
  removed = 0
  for _, size, path in sorted(entries):
    if total <= max_size:
      break
    _remove(path)
    total -= size
    removed += 1
  for _ in range(removed):
    _count("evictions")
  return removed


def _remove(path: str) -> None:
  try:
    os.remove(path)
  except OSError:
    pass


def store(cache_dir: str, key: str, exe: Any, min_size: int = 0) -> bool:
  """Writes `exe` under `key` in `cache_dir` atomically (temp file + `os.replace`), unless
  its entry would be smaller than `min_size` bytes (JAX's
  `jax_persistent_cache_min_entry_size_bytes`; 0 or less: any size).
  Returns whether it was written; an I/O failure warns and returns False."""
  try:
    data = _pack(exe.client.serialize_executable(exe), {"key": key})
  except Exception as e:   # noqa: BLE001 (a program the runtime cannot serialize)
    _count("errors")
    _warn(f"cannot serialize the executable: {e}.")
    return False
  if len(data) < min_size:
    return False
  tmp = None
  try:
    os.makedirs(cache_dir, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-" + key[:16] + "-", suffix=_SUFFIX, dir=cache_dir)
    with os.fdopen(fd, "wb") as f:
      f.write(data)
    os.chmod(tmp, 0o644)   # mkstemp makes it 0600; an entry is no secret
    os.replace(tmp, _entry_path(cache_dir, key))
    tmp = None
  except OSError as e:
    _count("errors")
    _warn(f"cannot write to {cache_dir!r}: {e}.")
    return False
  finally:
    if tmp is not None:
      _remove(tmp)
  _count("writes")
  return True
