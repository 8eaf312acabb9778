"""Typed errors. Each subclasses the built-in a user would catch and says what was expected,
what was given, where, and how to fix it."""
from __future__ import annotations

__all__ = ["ConcretizationTypeError", "TracerArrayConversionError",
           "TracerIntegerConversionError", "UnexpectedTracerError", "JaxprTypeError",
           "MissingRuleError", "DeviceAssignmentMismatchError", "DonatedBufferError"]


class ConcretizationTypeError(TypeError):
  """A traced (abstract) value was used where Python needs a concrete one.

  Failing example::

    @stagecraft.jit
    def f(x, n):
      return x * 2 if n > 0 else x     # bool() of a tracer

  Fix: mark the argument static (`jit(f, static_argnums=1)`), or use `stagecraft.lax.cond`
  / `stagecraft.numpy.where` instead of Python control flow.
  """


class TracerArrayConversionError(TypeError):
  """A tracer was converted to a NumPy array (`np.asarray(tracer)`) inside a transformation.

  Fix: use `stagecraft.numpy` functions on traced values instead of NumPy's.
  """


class TracerIntegerConversionError(TypeError):
  """A tracer was used where Python needs an int (`__index__`, e.g. `range(tracer)` or
  `lst[tracer]`). Fix: mark the argument static, or use `stagecraft.lax.dynamic_slice`."""


class UnexpectedTracerError(Exception):
  """A tracer escaped the transformation that created it and was used after it ended.

  Failing example::

    leaked = []
    @stagecraft.jit
    def f(x):
      leaked.append(x)     # side effect stores the tracer
      return x
    f(1.0)
    leaked[0] + 1          # UnexpectedTracerError

  Fix: return values out of transformed functions instead of storing them in outer state.
  """


class JaxprTypeError(TypeError):
  """`check_jaxpr` found an ill-typed jaxpr (an internal error or a bad user rule)."""


class MissingRuleError(NotImplementedError):
  """A primitive lacks the rule an interpreter needs (e.g. a lowering or a transpose rule)."""


class DeviceAssignmentMismatchError(ValueError):
  """The inputs of one computation are committed to different devices (or meshes), or
  disagree with the shardings given to `jit`.

  Failing example::

    x = stagecraft.device_put(a, stagecraft.devices()[0])
    y = stagecraft.device_put(b, NamedSharding(mesh, P("data")))
    stagecraft.jit(f)(x, y)      # device 0 vs the mesh's devices

  Fix: move the inputs onto one set of devices first with `stagecraft.device_put(x,
  sharding)`; stagecraft never moves committed data between devices on its own.
  """


class DonatedBufferError(RuntimeError):
  """An Array whose buffer was donated to a jitted computation was used again.

  Fix: do not reuse arguments passed at `donate_argnums`; use the function's outputs."""
