"""`stagecraft.experimental.key_reuse`: checking that typed PRNG keys are used once (JAX's
`jax.experimental.key_reuse`, experimental there too).

Turn the check on globally with `stagecraft.config.update("jax_debug_key_reuse", True)`, or
for a block with the `stagecraft.debug_key_reuse(True)` context manager. A typed key
(`stagecraft.random.key`) consumed twice then raises `stagecraft.errors.KeyReuseError`:

  >>> import stagecraft
  >>> with stagecraft.debug_key_reuse(True):
  ...   key = stagecraft.random.key(0)
  ...   val1 = stagecraft.random.normal(key)
  ...   val2 = stagecraft.random.normal(key)  # doctest: +IGNORE_EXCEPTION_DETAIL
  Traceback (most recent call last):
   ...
  KeyReuseError: Previously-consumed key passed to jit-compiled function at index 0

As in JAX, this package exports no names; the functions live in its `_core` module
(`check_key_reuse`, `KeyReuseSignature`, `Sink`, `Source`, `Forward`, `consume`, ...), and
the mechanism is described in `stagecraft.key_reuse`.
"""
