"""`stagecraft.extend.linear_util`: functions wrapped with a stack of transformations (JAX's
`jax.extend.linear_util`), for libraries that transform functions the way JAX's internals do.

A `WrappedFun` holds a function `f`, keyword params, and transformations applied on top. A
transformation is a generator or a function that runs around the wrapped call:

- `transformation2(gen)`: `gen(f, *static_args, *args, **kwargs)` calls `f` itself;
- `transformation_with_aux2(gen)`: `gen(f, store, *static_args, *args, **kwargs)` also
  stores auxiliary output (read after the call through the returned thunk);
- `transformation(gen)` and `transformation_with_aux(gen)`: the older generator protocol:
  `gen(*static_args, *args, **kwargs)` yields `(args, kwargs)` for the call, receives its
  result, and yields the answer (with `_aux`: `(answer, aux)`).

`cache(call)` memoizes `call(fun, *args)` on the function, its transformations, params,
`args` and the configuration that changes traced programs; cached calls restore the
auxiliary outputs. Two WrappedFuns are equal when they compute the same function (same `f`,
transformations and params), so they can key caches.

  >>> @transformation_with_aux2
  ... def scaled(f, store, scale, x):
  ...   y = f(x * scale)
  ...   store.store(y > 0)
  ...   return y
  >>> fun, aux = scaled(wrap_init(lambda x, k: x + k, {"k": 1}), 2)
  >>> fun.call_wrapped(3), aux()
  (7, True)

Semantics of JAX's `linear_util.py` (JAX 0.10.2), reimplemented; `wrap_init` takes any
`debug_info` (JAX warns when it is missing).
"""
from __future__ import annotations

import time
import weakref
from collections.abc import Callable
from functools import partial
from typing import Any

from stagecraft.config import config
from stagecraft.runtime import dispatch

__all__ = ["Callable", "StoreException", "WrappedFun", "cache", "merge_linear_aux",
           "transformation", "transformation2", "transformation_with_aux",
           "transformation_with_aux2", "wrap_init", "Store", "EqualStore"]


class StoreException(Exception):
  """A store was read while empty, or written twice."""


_EMPTY = object()


class Store:
  """Holds one auxiliary output of a transformation: written once, read after the call.

  Raises:
    StoreException: on a second `store` or a read of an empty store.
  """
  __slots__ = ("_val",)

  def __init__(self):
    self._val = _EMPTY

  def store(self, val: Any) -> None:
    if self._val is not _EMPTY:
      raise StoreException("Store occupied")
    self._val = val

  def reset(self) -> None:
    self._val = _EMPTY

  @property
  def val(self) -> Any:
    if self._val is _EMPTY:
      raise StoreException("Store empty")
    return self._val

  def __bool__(self) -> bool:
    return self._val is not _EMPTY


class EqualStore(Store):
  """A Store that accepts a second write of an equal value."""
  __slots__ = ()

  def store(self, val: Any) -> None:
    if self._val is _EMPTY:
      self._val = val
      return
    try:
      same = bool(self._val == val)
    except Exception:
      raise StoreException("Store occupied") from None
    if not same:
      raise StoreException("Store occupied with not-equal value")


def _name(f: Any) -> str:
  return getattr(f, "__name__", None) or type(f).__name__


class WrappedFun:
  """A function `f` with keyword `params` and `transforms` applied on top of it.

  Attributes:
    f: the wrapped function.
    f_transformed: `f` with the transformations and params applied (`call_wrapped` calls it).
    transforms: `((gen, static_args), ...)`, outermost first.
    stores: one Store (or None) per transformation, for their auxiliary outputs.
    params: `((name, value), ...)`, sorted by name, passed to `f` as keywords.
    in_type: the input avals, or None.
    debug_info: what `wrap_init` was given (None by default).
  """
  __slots__ = ("f", "f_transformed", "transforms", "stores", "params", "in_type",
               "debug_info")

  def __init__(self, f: Callable, f_transformed: Callable, transforms: tuple,
               stores: tuple, params: tuple, in_type: Any, debug_info: Any):
    self.f = f
    self.f_transformed = f_transformed
    self.transforms = transforms
    self.stores = stores
    self.params = params
    self.in_type = in_type
    self.debug_info = debug_info

  @property
  def __name__(self) -> str:
    return getattr(self.f, "__name__", "<unnamed wrapped function>")

  def wrap(self, gen: Callable, gen_static_args: tuple, out_store: Store | None
           ) -> "WrappedFun":
    """This function with the transformation `gen` (and its store) added on top."""
    inner = self.f_transformed
    called = (partial(gen, inner, *gen_static_args) if out_store is None
              else partial(gen, inner, out_store, *gen_static_args))
    return WrappedFun(self.f, called, ((gen, gen_static_args),) + self.transforms,
                      (out_store,) + self.stores, self.params, None, self.debug_info)

  def populate_stores(self, stores) -> None:
    """Copies the values of `stores` (a cached call's) into this function's stores."""
    for mine, theirs in zip(self.stores, stores):
      if mine is not None:
        mine.store(theirs.val)

  def call_wrapped(self, *args, **kwargs) -> Any:
    """Calls `f` through its transformations."""
    return self.f_transformed(*args, **kwargs)

  def replace_debug_info(self, debug_info: Any) -> "WrappedFun":
    return WrappedFun(self.f, self.f_transformed, self.transforms, self.stores, self.params,
                      self.in_type, debug_info)

  def __repr__(self):
    lines = [f"{i}   : {_name(gen)}   {args!r}" for i, (gen, args) in enumerate(self.transforms)]
    return "Wrapped function:\n" + "".join(ln + "\n" for ln in lines) + f"Core: {_name(self.f)}\n"

  def __hash__(self):
    return hash((self.f, self.transforms, self.params, self.in_type))

  def __eq__(self, other):
    return (isinstance(other, WrappedFun) and self.f == other.f
            and self.transforms == other.transforms and self.params == other.params
            and self.in_type == other.in_type)


def wrap_init(f: Callable, params: dict | None = None, *, debug_info: Any = None
              ) -> WrappedFun:
  """Wraps `f` (called with the keyword `params` added) as a `WrappedFun`.

  Raises:
    TypeError: if `f` is not callable.
  """
  if not callable(f):
    raise TypeError(f"wrap_init: expected a callable, got {f!r}.")
  params = dict(params or {})
  return WrappedFun(f, partial(f, **params), (), (), tuple(sorted(params.items())), None,
                    debug_info)


def _curry(impl: Callable) -> Callable:
  # `t = transformation(gen)` then `t(fun, *static_args)`, as JAX's curried decorators.
  return partial(partial, impl)


def _transformation2(gen: Callable, fun: WrappedFun, *gen_static_args) -> WrappedFun:
  return fun.wrap(gen, gen_static_args, None)


def _transformation_with_aux2(gen: Callable, fun: WrappedFun, *gen_static_args,
                              use_eq_store: bool = False, unk_names: bool = False
                              ) -> tuple[WrappedFun, Callable[[], Any]]:
  store = EqualStore() if use_eq_store else Store()
  return fun.wrap(gen, gen_static_args, store), lambda: store.val


def _transformation(gen: Callable, fun: WrappedFun, *gen_static_args) -> WrappedFun:
  def run(f, *args, **kwargs):
    it = gen(*args, **kwargs)
    call_args, call_kwargs = next(it)
    return it.send(f(*call_args, **call_kwargs))
  return fun.wrap(run, gen_static_args, None)


def _transformation_with_aux(gen: Callable, fun: WrappedFun, *gen_static_args
                             ) -> tuple[WrappedFun, Callable[[], Any]]:
  def run(f, store, *args, **kwargs):
    it = gen(*args, **kwargs)
    call_args, call_kwargs = next(it)
    ans, aux = it.send(f(*call_args, **call_kwargs))
    store.store(aux)
    return ans
  return _transformation_with_aux2(run, fun, *gen_static_args)


transformation2 = _curry(_transformation2)
transformation2.__doc__ = ("`transformation2(gen)(fun, *static_args)`: `fun` with `gen(f, "
                           "*static_args, *args, **kwargs)` around its call.")
transformation_with_aux2 = _curry(_transformation_with_aux2)
transformation_with_aux2.__doc__ = (
    "`transformation_with_aux2(gen)(fun, *static_args)` -> `(fun', aux_thunk)`: `gen(f, "
    "store, *static_args, *args, **kwargs)` stores auxiliary output, read with `aux_thunk()` "
    "after a call.")
transformation = _curry(_transformation)
transformation.__doc__ = ("`transformation(gen)(fun, *static_args)`: the generator protocol "
                          "(yield the call's `(args, kwargs)`, receive its result, yield the "
                          "answer).")
transformation_with_aux = _curry(_transformation_with_aux)
transformation_with_aux.__doc__ = ("As `transformation`, the generator's answer being "
                                   "`(ans, aux)`; returns `(fun', aux_thunk)`.")


def cache(call: Callable, *, explain: Callable | None = None) -> Callable:
  """Memoizes `call(fun: WrappedFun, *args)` on `fun` (its `f`, held weakly, transformations,
  params and input type), `args` (hashable) and the configuration that changes traced
  programs. A cache hit copies the auxiliary outputs of the first call into `fun`'s stores.
  `stagecraft.clear_caches()` empties it (`memoized.cache_clear()` too).

  Args:
    call: the function to memoize.
    explain: `explain(fun, first_use, cache, key, seconds)`, called on misses while
      `config.explain_cache_misses` is on.
  """
  per_fun: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

  def memoized(fun: WrappedFun, *args):
    table = per_fun.get(fun.f)
    first_use = table is None
    if first_use:
      table = per_fun[fun.f] = {}
    key = (fun.transforms, fun.params, fun.in_type, args, config.state_key)
    hit = table.get(key)
    if hit is not None:
      ans, stores = hit
      fun.populate_stores(stores)
      return ans
    start = time.perf_counter()
    ans = call(fun, *args)
    if explain is not None and config.explain_cache_misses:
      explain(fun, first_use, table, key, time.perf_counter() - start)
    table[key] = (ans, fun.stores)
    return ans

  memoized.cache_clear = per_fun.clear
  memoized.evict_function = lambda f: per_fun.pop(f, None)
  dispatch.register_cache_clearer(per_fun.clear)
  return memoized


def merge_linear_aux(aux1: Callable[[], Any], aux2: Callable[[], Any]) -> tuple[bool, Any]:
  """Of two aux thunks exactly one of which was filled (the two branches of a
  transformation), `(True, aux1())` or `(False, aux2())`.

  Raises:
    StoreException: if both or neither were filled.
  """
  try:
    first = aux1()
  except StoreException:
    try:
      return False, aux2()
    except StoreException:
      raise StoreException("neither store occupied") from None
  try:
    aux2()
  except StoreException:
    return True, first
  raise StoreException("both stores occupied")
