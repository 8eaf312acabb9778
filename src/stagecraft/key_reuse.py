"""Key reuse checking (config `debug_key_reuse`, JAX's `jax.experimental.key_reuse`).

With `debug_key_reuse` on, a typed PRNG key (`random.key`) may be consumed once: a second
`random.normal(key)` (or `split`, `bits`, any sampler) of the same key raises
`KeyReuseError`, eagerly and while tracing, with JAX 0.10.2's messages:

- eagerly: "Previously-consumed key passed to {op} at index {i}", `op` being
  "jit-compiled function" for the samplers and jitted functions, `random_split`,
  `random_bits` or `slice` for the operations JAX binds as bare primitives;
- while tracing: "In {op}, argument {i} is already consumed." (`op`: `jit`, `random_split`,
  `random_bits`, `slice`, `cond`, `scan`, `while`, `checkpoint`, `custom_jvp_call`,
  `custom_vjp_call`; under `disable_jit` the samplers name their first primitive);
- for loop bodies that would consume a key on every iteration (a key they close over, or a
  carried key they do not replace by a fresh one): JAX's "scan body function leads to key
  reuse when repeatedly executed, ..." and "while_loop ... function leads to key reuse ...".

How (stagecraft's jaxprs carry key data, `u32[..., 2]`, not key types, so JAX's analysis
of a jaxpr's key-typed variables has nothing to read): each typed key array carries a
`KeyVar`, its consumed state (a bool, or a bool array of the key array's shape when parts
were consumed by slicing). The operations on typed keys (in `random`) consume ("sink"),
create fresh keys ("source"), or pass a key's state on ("forward") as JAX's per-primitive
signatures say, and `jit` summarizes the function it traces as a `KeyReuseSignature`
(which arguments it consumes, which results are fresh or forwarded arguments), checked and
applied at every call of the compiled function, as JAX's `jaxpr_type_signature` is; so do
`checkpoint`, `cond` (its branches' signatures joined), `scan` and `while_loop` (checked
for repeated execution). A body being traced is a `scope`: keys it closes over are consumed
in its record, applied by the caller (once per call of a jit function; never inside a loop
body). `vmap`'s body keys share their arguments' state; under `grad` the primal keys are the
arguments themselves; `custom_jvp`/`custom_vjp` functions keep the signature of their primal
function. Keys given as arguments to other bodies (`shard_map`, `pmap`, `jvp`, the custom
rules) start fresh there and their consumption stays there (docs/differences.md).

Algorithm and messages: JAX 0.10.2's `jax/experimental/key_reuse/_core.py` (reimplemented).
"""
from __future__ import annotations

import threading
from functools import total_ordering
from typing import Any, Callable, Iterator, NamedTuple

import numpy as np

from stagecraft import core
from stagecraft.config import config
from stagecraft.errors import KeyReuseError

__all__ = ["Sink", "Source", "Forward", "KeyReuseSignature", "KeyVar", "enabled",
           "register_key_type", "is_key", "sink", "check", "body_signature", "apply",
           "staging", "error", "call", "scope", "Scope", "effective", "mark", "BodyKeys",
           "join_branches", "check_loop", "share", "share_results", "operation",
           "primitive_operation"]


@total_ordering
class _SourceSinkBase:
  """A key position (`idx`) and the part of its keys concerned (`mask`: True, or a bool
  array of the key array's shape). Immutable, compared and hashed by value."""
  __slots__ = ("idx", "mask")

  def __init__(self, idx: int, mask: bool | np.bool_ | np.ndarray = True):
    if not isinstance(idx, int):
      raise TypeError(f"{type(self).__name__} index must be an int, got {idx!r}")
    if isinstance(mask, np.ndarray):
      if mask.dtype != np.dtype(bool):
        raise TypeError(f"{type(self).__name__} mask must be boolean, got {mask.dtype}")
      if not mask.any():   # an empty mask is no mask (checked before all(): vacuous)
        mask = False
      elif mask.all():
        mask = True
      else:
        mask = np.array(mask, copy=True)
        mask.flags.writeable = False
    elif isinstance(mask, np.bool_):
      mask = bool(mask)
    elif not isinstance(mask, bool):
      raise TypeError(f"{type(self).__name__} mask must be a bool or a bool array, "
                      f"got {mask!r}")
    object.__setattr__(self, "idx", idx)
    object.__setattr__(self, "mask", mask)

  def __setattr__(self, *args, **kwargs):
    raise ValueError(f"{type(self).__name__} is immutable")

  def __eq__(self, other):
    return (type(self) is type(other) and self.idx == other.idx
            and np.shape(self.mask) == np.shape(other.mask)
            and bool(np.all(self.mask == other.mask)))

  def __lt__(self, other):
    if isinstance(other, Forward):
      return True
    if isinstance(other, _SourceSinkBase):
      return (type(self).__name__, self.idx) < (type(other).__name__, other.idx)
    return NotImplemented

  def __hash__(self):
    if isinstance(self.mask, bool):
      return hash((type(self), self.idx, self.mask))
    m = np.asarray(self.mask)
    return hash((type(self), self.idx, m.shape, tuple(m.ravel().tolist())))

  def __repr__(self):
    if self.mask is True:
      return f"{type(self).__name__}({self.idx})"
    return f"{type(self).__name__}({self.idx}, {self.mask})"


class Sink(_SourceSinkBase):
  """Argument `idx` is consumed (where `mask` is True)."""


class Source(_SourceSinkBase):
  """Result `idx` is a fresh, unconsumed key (where `mask` is True)."""


class Forward(NamedTuple):
  """Result `out_idx` is argument `in_idx`, passed on with its consumed state."""
  in_idx: int
  out_idx: int

  def __repr__(self):
    return f"Forward({self.in_idx}, {self.out_idx})"


class KeyReuseSignature:
  """What a function does to the keys it takes and returns: a frozen set of `Sink`,
  `Source` and `Forward` entries (JAX's `KeyReuseSignature`)."""

  def __init__(self, *args: Sink | Source | Forward):
    self._args = frozenset(args)

  def __repr__(self):
    return f"KeyReuseSignature{tuple(sorted(self._args))}"

  def __eq__(self, other):
    return isinstance(other, KeyReuseSignature) and self._args == other._args

  def __hash__(self):
    return hash(self._args)

  @property
  def sinks(self) -> Iterator[Sink]:
    yield from (s for s in self._args if isinstance(s, Sink))

  @property
  def sources(self) -> Iterator[Source]:
    yield from (s for s in self._args if isinstance(s, Source))

  @property
  def forwards(self) -> Iterator[Forward]:
    yield from (s for s in self._args if isinstance(s, Forward))

  def check_signature(self, *args: Any, funcname: str = "function", context=None) -> None:
    """Raises `KeyReuseError` if a key argument this signature consumes is (in part)
    consumed already: "Previously-consumed key passed to {funcname} at index {i}"."""
    for s in self.sinks:
      key = args[s.idx]
      if is_key(key) and np.any(np.logical_and(effective(key.kr_var), s.mask)):
        raise KeyReuseError(f"Previously-consumed key passed to {funcname} at index {s.idx}")

  def update_consumption(self, args_in: Any, args_out: Any) -> None:
    """Marks the consumed arguments, and the results: consumed unless a `Source` (fresh)
    or a `Forward` (the argument's state, copied)."""
    apply(self, list(args_in), list(args_out), share=False)


class KeyVar:
  """The consumed state of a typed key array: `consumed` is a bool, or a bool array of
  the key array's shape (keys consumed one by one, by slicing). `level` is the depth of
  traced bodies (`scope`) it was made in: a body consuming a key of an enclosing level
  (one it closes over) records that in its scope rather than in the key."""
  __slots__ = ("consumed", "level")

  def __init__(self, consumed: bool | np.ndarray = False):
    self.consumed = consumed
    self.level = len(_tls.scopes)

  def __repr__(self):
    return f"KeyVar(consumed={self.consumed})"


_key_types: set[type] = set()


class Scope:
  """A body being traced (a jit function, a cond branch, a loop body): `outer` maps the
  keys of enclosing levels it consumed (`id(KeyVar)`) to `(KeyVar, mask)`."""
  __slots__ = ("outer",)

  def __init__(self):
    self.outer: dict[int, tuple[KeyVar, Any]] = {}

  def consumed_outer(self) -> list[tuple[KeyVar, Any]]:
    return [(v, m) for v, m in self.outer.values() if np.any(m)]


class _Scopes(threading.local):
  def __init__(self):
    self.scopes: list[Scope] = []   # the bodies being traced in this thread, innermost last


_tls = _Scopes()


class scope:
  """`with scope() as sc:` traces a body: keys made inside belong to it; consumption of
  keys from outside is recorded in `sc.outer` (and seen by checks inside), and applied
  by the caller (`mark`) as the construct the body belongs to says."""

  def __enter__(self) -> Scope:
    sc = Scope()
    _tls.scopes.append(sc)
    return sc

  def __exit__(self, *exc):
    _tls.scopes.pop()
    return False


def effective(var: KeyVar) -> Any:
  """`var`'s consumed state as the innermost body being traced sees it."""
  out = var.consumed
  for sc in _tls.scopes[var.level:]:
    e = sc.outer.get(id(var))
    if e is not None:
      out = _or(out, e[1])
  return out


def mark(var: KeyVar, mask: Any) -> None:
  """Consumes `var` (under `mask`): in the key itself, or in the innermost body's record
  when the key comes from an enclosing level."""
  scopes = _tls.scopes
  if var.level < len(scopes):
    sc = scopes[-1]
    e = sc.outer.get(id(var))
    sc.outer[id(var)] = (var, mask if e is None else _or(e[1], mask))
  else:
    var.consumed = _or(var.consumed, mask)


def register_key_type(cls: type) -> None:
  """Registers a typed-key class; its instances have a `kr_var` attribute (a `KeyVar`)."""
  _key_types.add(cls)


def enabled() -> bool:
  """Whether key reuse is checked (config `debug_key_reuse`)."""
  return config.debug_key_reuse


def is_key(x: Any) -> bool:
  """Whether `x` is a typed key array."""
  return type(x) in _key_types


def staging() -> bool:
  """Whether an operation now is staged into a jaxpr (the traced messages) or runs
  eagerly, possibly under transformations that run each primitive now (`vmap`, forward and
  reverse-mode AD over concrete primals), whose traces have a `parent`."""
  t = core.trace_state.trace
  while t is not core.eval_trace:
    t = getattr(t, "parent", None)
    if t is None:
      return True
  return False


def share(outer: list, inner: list) -> None:
  """Makes each key of `inner` (a transformation's body's arguments, rebuilt around its
  tracers) share the consumed state of the key of `outer` it stands for: consuming it in
  the body consumes the argument (JAX's keys under `vmap`)."""
  for x, y in zip(outer, inner):
    if is_key(x) and is_key(y):
      y.kr_var = x.kr_var


def share_results(outer_in: list, inner_out: list, outer_out: list) -> None:
  """After `share`: a result of the transformation whose body returned an argument's key
  shares that argument's state."""
  ins = {id(x.kr_var) for x in outer_in if is_key(x)}
  for y, z in zip(inner_out, outer_out):
    if is_key(y) and is_key(z) and id(y.kr_var) in ins:
      z.kr_var = y.kr_var


def error(op: str, index: int) -> KeyReuseError:
  """JAX's error for a consumed key given to `op` at argument `index`: the traced message
  inside a trace, the eager one outside."""
  if staging():
    return KeyReuseError(f"In {op}, argument {index} is already consumed.")
  name = "jit-compiled function" if op == "jit" else op
  return KeyReuseError(f"Previously-consumed key passed to {name} at index {index}")


def check(key: Any, op: str, index: int = 0, mask: Any = True) -> None:
  """Raises `error(op, index)` if `key`'s keys under `mask` are (in part) consumed."""
  if is_key(key) and np.any(np.logical_and(effective(key.kr_var), mask)):
    raise error(op, index)


def sink(key: Any, op: str, index: int = 0, mask: Any = True) -> None:
  """Consumes `key` (its keys under `mask`) for operation `op`, first checking that they
  were not consumed before."""
  if not is_key(key):
    return
  check(key, op, index, mask)
  mark(key.kr_var, mask)


def operation(op: str, eager_op: str, ins: list, outs: list, sinks: Any = (),
              forward: int | None = None, fresh: bool = True) -> None:
  """JAX's signature of one operation on typed keys (a primitive, or a jnp function JAX
  jits): the key operands at positions `sinks` (all of them for `"all"`; `(position,
  index, eager)` names the operand `index` in the messages, and with `eager` False
  consumes it only while staging: JAX's function hands the primitive a copy) are checked,
  then consumed (errors name `op` while staging, `eager_op` eagerly: "jit" for a jitted
  function and for the primitives JAX's table lacks, which it runs as jit programs); the
  key results take the state of operand `forward` (shared while staging, copied eagerly:
  JAX's `Forward`), else start fresh (a `Source`) or, unless `fresh`, consumed (the
  results of the primitives JAX's table lacks)."""
  if sinks == "all":
    sinks = [i for i, x in enumerate(ins) if is_key(x)]
  sinks = [s if isinstance(s, tuple) else (s, s, True) for s in sinks]
  staged = staging()
  name = op if staged else eager_op
  for i, idx, _ in sinks:
    check(ins[i], name, idx)
  for i, _, eager in sinks:
    if is_key(ins[i]) and (eager or staged):
      mark(ins[i].kr_var, True)
  src = ins[forward] if forward is not None else None
  for o in outs:
    if is_key(o):
      if is_key(src):
        o.kr_var = src.kr_var if staged else KeyVar(_copy(src.kr_var.consumed))
      elif not fresh:
        o.kr_var = KeyVar(True)


# JAX's key reuse table (jax/experimental/key_reuse/_core.py) for the primitives that may
# take typed keys: the operand whose state the results take; `dynamic_update_slice` and
# `scatter` consume their update too; `eq`/`ne` consume nothing; `concatenate` of several
# operands consumes them all; any other primitive consumes its key operands.
_FORWARDING = {"broadcast_in_dim", "copy", "reshape", "squeeze", "convert_element_type",
               "dynamic_slice", "gather", "sharding_constraint", "reshard", "device_put"}
_UPDATING = {"dynamic_update_slice": 1, "scatter": 2}


def primitive_operation(prim: Any, ins: list, outs: list) -> None:
  """`operation` for a primitive bound on typed key arrays (`core.staged_leaves`)."""
  name = prim.name
  if name in _FORWARDING:
    operation(name, name, ins, outs, (), 0)
  elif name in _UPDATING:
    operation(name, name, ins, outs, (_UPDATING[name],), 0)
  elif name in ("eq", "ne", "random_unwrap"):
    return
  elif name == "concatenate":
    operation(name, name, ins, outs, "all" if len(ins) > 1 else (), 0 if len(ins) == 1 else None)
  elif name != "slice":   # NB: slices of keys: `random`'s indexing applies JAX's mask rule
    operation(name, "jit", ins, outs, "all", fresh=False)


def _or(a, b):
  out = np.logical_or(a, b)
  return bool(out) if np.ndim(out) == 0 else out


def body_signature(in_leaves: list, out_leaves: list) -> KeyReuseSignature:
  """The signature of a traced body whose key arguments (`in_leaves`, each made fresh for
  the trace) and results (`out_leaves`) are given: the arguments consumed, the results that
  are arguments passed on (`Forward`), and the results that are fresh keys (`Source`)."""
  entries: list = []
  by_var: dict[int, int] = {}
  for i, x in enumerate(in_leaves):
    if is_key(x):
      by_var.setdefault(id(x.kr_var), i)
      if np.any(x.kr_var.consumed):
        entries.append(Sink(i, _mask(x.kr_var.consumed)))
  for j, y in enumerate(out_leaves):
    if not is_key(y):
      continue
    i = by_var.get(id(y.kr_var))
    if i is not None:
      entries.append(Forward(i, j))
    elif not np.any(y.kr_var.consumed):
      entries.append(Source(j))
  return KeyReuseSignature(*entries)


def _mask(consumed):
  return consumed if isinstance(consumed, np.ndarray) else bool(consumed)


def apply(sig: KeyReuseSignature, args_in: list, args_out: list, share: bool) -> None:
  """Applies a call's signature: marks consumed arguments, makes the key results consumed
  unless `Source`s (fresh) or `Forward`s (the argument's state: the same `KeyVar` when
  `share`, as within a traced program, a copy of it eagerly, as JAX's eager check)."""
  for s in sig.sinks:
    x = args_in[s.idx]
    if is_key(x):
      mark(x.kr_var, s.mask)
  for y in args_out:
    if is_key(y):
      y.kr_var = KeyVar(True)
  for s in sig.sources:
    y = args_out[s.idx]
    if is_key(y):
      y.kr_var = KeyVar(_mask(np.logical_not(s.mask)))
  for f in sig.forwards:
    x, y = args_in[f.in_idx], args_out[f.out_idx]
    if is_key(x) and is_key(y):
      y.kr_var = x.kr_var if share else KeyVar(_copy(effective(x.kr_var)))


def _copy(consumed):
  return consumed.copy() if isinstance(consumed, np.ndarray) else consumed


class BodyKeys(NamedTuple):
  """What a traced body does with keys: its `signature` over its arguments and results,
  and the keys of enclosing levels it consumes (`outer`: `(KeyVar, mask)` pairs)."""
  signature: KeyReuseSignature
  outer: tuple


def call(body: BodyKeys | None, op: str, args_in: list, run: Callable[[], Any],
         out_leaves: Callable[[Any], list], offset: int = 0) -> Any:
  """Runs `run()` (a call of a body whose key use is `body`, with the flat `args_in`),
  checking first that it consumes no consumed key (the message naming `op` and the
  argument's index plus `offset`; the keys it closes over come after the arguments), then
  applying its signature to the arguments and to the key results `out_leaves(result)`."""
  if body is None:
    return run()
  share = staging()
  sig = body.signature
  for s in sig.sinks:
    check(args_in[s.idx], op, s.idx + offset, s.mask)
  for c, (var, mask) in enumerate(body.outer):
    if np.any(np.logical_and(effective(var), mask)):
      raise error(op, len(args_in) + offset + c)
  out = run()
  apply(sig, args_in, out_leaves(out), share)
  for var, mask in body.outer:
    mark(var, mask)
  return out


def join_branches(bodies: list[BodyKeys]) -> BodyKeys:
  """The key use of a `cond` of the branches `bodies` (JAX's rule): an argument is
  consumed where any branch consumes it, a result is fresh where every branch makes it
  fresh, a result is an argument passed on if every branch passes it on; keys closed over
  are consumed where any branch consumes them."""
  sinks: dict[int, Any] = {}
  sources: dict[int, list] = {}
  for b in bodies:
    for s in b.signature.sinks:
      sinks[s.idx] = _or(sinks.get(s.idx, False), s.mask)
    for s in b.signature.sources:
      sources.setdefault(s.idx, []).append(s.mask)
  entries: list = [Sink(i, _mask(m)) for i, m in sinks.items()]
  for i, ms in sources.items():
    if len(ms) == len(bodies):
      m = ms[0]
      for x in ms[1:]:
        m = np.logical_and(m, x)
      entries.append(Source(i, _mask(np.asarray(m)) if np.ndim(m) else bool(m)))
  fwd = set(bodies[0].signature.forwards)
  for b in bodies[1:]:
    fwd &= set(b.signature.forwards)
  entries.extend(fwd)
  outer: dict[int, tuple] = {}
  for b in bodies:
    for var, m in b.outer:
      e = outer.get(id(var))
      outer[id(var)] = (var, m if e is None else _or(e[1], m))
  return BodyKeys(KeyReuseSignature(*entries), tuple(outer.values()))


def check_loop(kind: str, body: BodyKeys, num_carry: int, cond: BodyKeys | None = None
               ) -> None:
  """JAX's checks that a loop body can run repeatedly (`kind`: "scan" or "while_loop"):
  it consumes no key it closes over, and consumes only the carried keys it replaces with
  fresh ones; a while loop's cond may consume only carried keys the body replaces, and
  not the same as the body.

  Raises:
    KeyReuseError: with JAX's first line ("scan body function leads to key reuse when
      repeatedly executed, because ...").
  """
  sig = body.signature
  sinks = {s.idx for s in sig.sinks if s.idx < num_carry and np.any(s.mask)}
  sources = {s.idx for s in sig.sources if s.idx < num_carry and np.any(s.mask)}
  passed = {f.in_idx for f in sig.forwards if f.in_idx == f.out_idx}
  if kind == "scan":
    # NB: as JAX's, a carry the body passes through unchanged is a constant of the loop
    if body.outer or (sinks & passed):
      raise KeyReuseError("scan body function leads to key reuse when repeatedly executed, "
                          f"because key constants are repeatedly consumed:\n  signature={sig}")
    if not sinks <= sources:
      raise KeyReuseError("scan body function leads to key reuse when repeatedly executed, "
                          f"because consumed inputs don't match sourced outputs:\n"
                          f"  signature={sig}")
    return
  assert cond is not None
  csig = cond.signature
  cond_sinks = {s.idx for s in csig.sinks if np.any(s.mask)}
  all_sources = {s.idx for s in sig.sources}
  if cond.outer:
    raise KeyReuseError("while_loop cond function leads to key reuse when repeatedly "
                        f"executed:   cond_signature={csig}")
  if body.outer:
    raise KeyReuseError("while_loop body function leads to key reuse when repeatedly "
                        f"executed:   body_signature={sig}")
  if not cond_sinks <= all_sources:
    raise KeyReuseError("while_loop cond function leads to key reuse when repeatedly "
                        f"executed:   cond_signature={csig}")
  body_sinks = {s.idx for s in sig.sinks}
  if not body_sinks <= all_sources:
    raise KeyReuseError("while_loop body function leads to key reuse when repeatedly "
                        f"executed:   body_signature={sig}")
  if body_sinks & cond_sinks:
    raise KeyReuseError("while_loop cond and body functions both use the same key:   "
                        f"cond_signature={csig}\n  body_signature={sig}")
