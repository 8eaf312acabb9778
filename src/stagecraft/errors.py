"""Typed errors. Each subclasses the built-in a user would catch and says what was expected,
what was given, where, and how to fix it.

The class tree is JAX's (`jax.errors`): the tracer errors are `JAXTypeError`s (so
`TypeError`s), `NonConcreteBooleanIndexError` is a `JAXIndexError` (an `IndexError`),
`TracerBoolConversionError` is a `ConcretizationTypeError`, and `JaxRuntimeError` is the
runtime's own exception class (jaxlib's `XlaRuntimeError`), raised by XLA.
"""
from __future__ import annotations

from jaxlib import xla_client as _xc

__all__ = ["JAXTypeError", "JAXIndexError", "ConcretizationTypeError",
           "TracerArrayConversionError", "TracerBoolConversionError",
           "TracerIntegerConversionError", "UnexpectedTracerError", "JaxprTypeError",
           "MissingRuleError", "DeviceAssignmentMismatchError", "DonatedBufferError",
           "NonConcreteBooleanIndexError", "KeyReuseError", "InconclusiveDimensionOperation",
           "JaxRuntimeError"]


class _FromTracer:
  """JAX's constructors of the tracer errors: `ConcretizationTypeError(tracer, context="")`,
  `TracerBoolConversionError(tracer)`, ... build JAX's message (what the tracer is, where it
  came from, the link to JAX's page of the error); a message string is kept as given."""

  def __init__(self, *args):
    if args and hasattr(args[0], "_concretization_error"):   # a Tracer (core imports us)
      tracer, *rest = args
      args = (str(tracer._concretization_error("", type(self),
                                               context=rest[0] if rest else "")),)
    super().__init__(*args)


class _ErrorPage:
  """JAX's errors built from a message end with the link to the error's section of JAX's
  errors page ("See https://docs.jax.dev/en/latest/errors.html#jax.errors.KeyReuseError");
  a message that has it already is kept."""

  def __init__(self, *args):
    if len(args) == 1 and isinstance(args[0], str) and _ERRORS_PAGE not in args[0]:
      args = (f"{args[0]}\nSee {_ERRORS_PAGE}#jax.errors.{type(self).__name__}",)
    super().__init__(*args)


_ERRORS_PAGE = "https://docs.jax.dev/en/latest/errors.html"


class JAXTypeError(TypeError):
  """The base class of stagecraft's `TypeError`s about traced values (JAX's name)."""


class JAXIndexError(IndexError):
  """The base class of stagecraft's `IndexError`s about traced indices (JAX's name)."""


JaxRuntimeError = _xc.XlaRuntimeError
"""The exception XLA raises at run time (out of memory, a failed host callback, a
collective that timed out): the runtime's own class, so `except JaxRuntimeError` catches what
jaxlib raises."""


class ConcretizationTypeError(_FromTracer, JAXTypeError):
  """A traced (abstract) value was used where Python needs a concrete one.

  Failing example::

    @stagecraft.jit
    def f(x, n):
      return x * 2 if n > 0 else x     # bool() of a tracer

  Fix: mark the argument static (`jit(f, static_argnums=1)`), or use `stagecraft.lax.cond`
  / `stagecraft.numpy.where` instead of Python control flow.
  """


class TracerBoolConversionError(ConcretizationTypeError):
  """`bool()` of a traced value: a Python `if`, `while`, `and`/`or`/`not` on a value whose
  truth is known only when the compiled program runs.

  Failing example::

    @stagecraft.jit
    def f(x):
      return x if x > 0 else -x       # bool(x > 0) of a tracer

  Fix: `stagecraft.numpy.where(x > 0, x, -x)` or `stagecraft.lax.cond`; or, when the value
  is a constant of the program, pass it as a static argument (`static_argnums`).
  """


class TracerArrayConversionError(_FromTracer, JAXTypeError):
  """A tracer was converted to a NumPy array (`np.asarray(tracer)`) inside a transformation.

  Fix: use `stagecraft.numpy` functions on traced values instead of NumPy's.
  """


class TracerIntegerConversionError(_FromTracer, JAXTypeError):
  """A tracer was used where Python needs an int (`__index__`, e.g. `range(tracer)` or
  `lst[tracer]`). Fix: mark the argument static, or use `stagecraft.lax.dynamic_slice`."""


class UnexpectedTracerError(_ErrorPage, JAXTypeError):
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


# NB: JAX raises a plain `ValueError` ("Received incompatible devices for jitted
# computation. ...") when the inputs of one computation are committed to different devices
# (or meshes) or disagree with jit's shardings; so does stagecraft: `type(e)` is ValueError,
# as JAX users see it. The name stays for code that catches it (it catches every ValueError).
DeviceAssignmentMismatchError = ValueError


class DonatedBufferError(RuntimeError):
  """An Array whose buffer was donated to a jitted computation was used again.

  Fix: do not reuse arguments passed at `donate_argnums`; use the function's outputs."""


class NonConcreteBooleanIndexError(JAXIndexError):
  """A boolean mask whose values are traced was used as an index: the result's shape would
  depend on the values.

  Failing example::

    @stagecraft.jit
    def f(x):
      return x[x > 0].sum()

  Fix: `stagecraft.numpy.where(x > 0, x, 0).sum()`, or give the result a static size
  (`x[jnp.nonzero(x > 0, size=n, fill_value=...)]`).
  """

  def __init__(self, *args):
    if args and hasattr(args[0], "_concretization_error"):   # JAX's constructor: a tracer
      args = (f"Array boolean indices must be concrete; got {args[0]!r}\n\nSee "
              f"https://docs.jax.dev/en/latest/errors.html#jax.errors."
              f"NonConcreteBooleanIndexError",)
    super().__init__(*args)


class KeyReuseError(_ErrorPage, JAXTypeError):
  """A PRNG key was consumed twice while `config.debug_key_reuse` was on.

  Fix: `stagecraft.random.split` the key and use each new key once.
  """


class InconclusiveDimensionOperation(Exception):
  """A comparison or arithmetic on a symbolic dimension whose result depends on the
  dimension's value (JAX's shape polymorphism; stagecraft's shapes are static, so it is
  raised only by code written for symbolic shapes)."""
