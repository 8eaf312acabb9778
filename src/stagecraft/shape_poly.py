"""Symbolic dimensions (JAX's shape polymorphism): dimension expressions for avals.

A `_DimExpr` is an integer polynomial over dimension variables (`b`, `batch`), with
`floordiv(e, d)` and `mod(e, d)` of an expression by a constant or by another dimension (when
the division is not exact, as JAX's) as extra atoms. It is used as
a dimension of a `ShapedArray` (`f32[b,4]`) when `stagecraft.export` traces a function for
every size of a dimension at once. Arithmetic with ints and other expressions normalizes
(`(2*b + 2) // 2` is `b + 1`, `b - b` is the int 0); comparisons are decided from bounds
(each variable is at least 1, and the scope's constraints such as `"b >= 4"`,
`"a >= b"`) and raise `InconclusiveDimensionOperation` when the answer depends on the values
(as JAX's do). `==` answers True only when the two sides are the same polynomial.

The printed form is JAX's: `b`, `2*b`, `b + 1`, `- b + 3`, `a*b^2`, `floordiv(b, 2)`,
`mod(b, 3)`.

The algebra is the ordinary one of polynomials over the integers (a term is a product of
atoms with powers; terms are kept in a canonical sorted order); bounds follow interval
arithmetic (Moore, "Interval Analysis", 1966) with every variable in [1, inf).
"""
from __future__ import annotations

import functools
import math
import operator
import re
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from stagecraft.errors import InconclusiveDimensionOperation

__all__ = ["SymbolicScope", "symbolic_shape", "is_symbolic_dim", "is_constant_dim",
           "is_constant_shape", "parse_dim", "max_dim", "min_dim", "canonicalize_slice",
           "InconclusiveDimensionOperation"]

_INF = math.inf

_TAIL = ("\nThis error arises for comparison operations with shapes that\n"
         "are non-constant, and the result of the operation cannot be represented as\n"
         "a boolean value for all values of the symbolic dimensions involved.\n\n"
         "Please see https://docs.jax.dev/en/latest/export/shape_poly.html"
         "#comparison-of-symbolic-dimensions-is-partially-supported\nfor more details.\n")


def _inconclusive(msg: str) -> InconclusiveDimensionOperation:
  return InconclusiveDimensionOperation(msg + _TAIL)


class SymbolicScope:
  """The scope of symbolic dimensions (JAX's `SymbolicScope`): the constraints that hold
  for its variables, e.g. `("b >= 4", "a >= b", "c <= 16")`.

  Each constraint is `e1 >= e2`, `e1 <= e2`, `e1 > e2`, `e1 < e2` or `e1 == e2` over
  dimension expressions. Comparisons use the inequalities on top of every variable being at
  least 1: a single-variable constraint bounds that variable, and any constraint `p >= 0`
  decides `e >= 0` when `e - p` is known to be non-negative. An equality is JAX's rewrite
  rule: its left side is one term times a coefficient (`a * b`, `4 * a`, `floordiv(a, b)`),
  and every expression built in the scope with that term, its coefficient a multiple of
  the left side's, has it replaced by the right side (`a * b == c + d` makes `2 * a * b`
  into `2*d + 2*c`). Calls of an exported function check every constraint.

  Raises:
    ValueError: a constraint that does not parse, is false for every value, or an equality
      whose left side is not one term (JAX's message).
    NotImplementedError: two equalities with the same left side (JAX's).
  """

  def __init__(self, constraints_str: Sequence[str] = ()):
    if isinstance(constraints_str, str):
      raise ValueError(f"The symbolic constraints should be a sequence of strings. Got "
                       f"{constraints_str!r}")
    self._constraints_str = tuple(constraints_str)
    self._var_bounds: dict[str, list] = {}
    self._polys: list[_DimExpr] = []   # each p with p >= 0
    # Every constraint: (its text, p, op), the constraint being `p >= 0` (op ">=") or
    # `p == 0` (op "==", p its left side minus its right side, not rewritten).
    self._checks: list[tuple] = []
    # The equalities as rewrite rules: term -> (right side, the left side's coefficient).
    self._rules: dict = {}
    for c in self._constraints_str:
      self._add_constraint(c)

  def _add_constraint(self, c: str) -> None:
    m = re.fullmatch(r"\s*(.+?)\s*(>=|<=|>|<|==)\s*(.+?)\s*", c)
    if m is None:
      raise ValueError(f"Invalid constraint {c!r}: expected 'e1 >= e2', 'e1 <= e2', "
                       f"'e1 > e2' or 'e1 < e2' over dimension expressions.")
    lhs, op, rhs = m.groups()
    e1, e2 = _parse(lhs, self), _parse(rhs, self)
    if op == "==":
      diff = e1 - e2   # NB: before the rule exists, so it is not rewritten to 0
      if isinstance(diff, int):
        if diff != 0:
          raise ValueError(f"Unsatisfiable explicit constraint: {c}")
        return
      if not isinstance(e1, _DimExpr) or len(e1._terms) != 1 or not e1._terms[0][0]:
        raise ValueError(f"Invalid equality constraint: {lhs} == {rhs}. The left-hand-side "
                         f"must be of the form `term * coefficient`.")
      (t, k), = e1._terms
      if t in self._rules:
        raise NotImplementedError(f"Found multiple equality constraints with the same "
                                  f"left-hand-side: {_term_str(t)}")
      self._rules[t] = (e2, k)
      self._checks.append((c.strip(), diff, "=="))
      return
    p = {">=": e1 - e2, "<=": e2 - e1, ">": e1 - e2 - 1, "<": e2 - e1 - 1}[op]
    if isinstance(p, int):
      if p < 0:
        raise ValueError(f"Invalid constraint {c!r}: it is false.")
      return
    self._checks.append((c.strip(), p, ">="))
    terms = p._terms
    # A bound on one variable: coef*v + const >= 0.
    if len(terms) <= 2 and all(len(t) <= 1 for t, _ in terms):
      lin = [(t, k) for t, k in terms if t]
      if len(lin) == 1 and len(lin[0][0]) == 1 and lin[0][0][0][1] == 1 \
          and lin[0][0][0][0][0] == "var":
        (((_, name), _),), k = lin[0]
        const = dict(terms).get((), 0)
        lo, hi = self._var_bounds.setdefault(name, [1, _INF])
        if k > 0:   # v >= -const / k
          self._var_bounds[name][0] = max(lo, math.ceil(-const / k))
        else:       # v <= const / -k
          self._var_bounds[name][1] = min(hi, math.floor(const / -k))
        return
    self._polys.append(p)

  def constraint_polys(self) -> list:
    """The constraints that bound no single variable, each as `p` with `p >= 0`."""
    return list(self._polys)

  def constraint_checks(self) -> list:
    """Every constraint as (its text, `p`, op), in order: op ">=" for `p >= 0`, "==" for
    `p == 0`."""
    return list(self._checks)

  def _normalize(self, terms: dict) -> dict:
    """`terms` with the equalities' left sides replaced by their right sides."""
    out: dict = {}
    for t, k in terms.items():
      rule = self._rules.get(t)
      if rule is not None and k % rule[1] == 0:
        rhs, rk = rule
        for t2, k2 in _operand_terms(rhs):
          out[t2] = out.get(t2, 0) + k2 * (k // rk)
      else:
        out[t] = out.get(t, 0) + k
    return out

  def var_bounds(self, name: str) -> tuple:
    lo, hi = self._var_bounds.get(name, (1, _INF))
    return lo, hi

  def __str__(self):
    return f"SymbolicScope({', '.join(map(repr, self._constraints_str))})"

  __repr__ = __str__


_DEFAULT_SCOPE = SymbolicScope()

#: `d -> scalar integer array` computing a symbolic dimension at run time; set by
#: `stagecraft.lax.misc` (its `dim_as_value` primitive), which this layer cannot import.
dimension_as_value_hook: Callable | None = None

# A factor is ("var", name), ("floordiv" | "mod", operand, divisor: each an int or a _DimExpr), or
# ("max" | "min", operand, operand), each operand a _DimExpr or an int.
# A term is a sorted tuple of (factor, power); () is the constant term.
# An expression is a tuple of (term, coefficient), sorted as JAX prints them.


# JAX's syntactic order (its `_syntactic_cmp`s): by size first, where a variable has size 1,
# an operation 1 + its operands' sizes (an int operand 1), a term the sum over its factors of
# 1 + power * size, an expression the sum over its terms of 1 + |coefficient| * size; then
# variable names, operation names, and the operands or factors or terms in order. A term's
# factors are in increasing order, an expression's terms in decreasing order (the constant
# term, of size 0, last).


def _cmp(a, b) -> int:
  return (a > b) - (a < b)


def _cmp_seq(s1, s2, cmp) -> int:
  for e1, e2 in zip(s1, s2):
    if c := cmp(e1, e2):
      return c
  return _cmp(len(s1), len(s2))


def _operand_terms(o) -> tuple:
  return o._terms if isinstance(o, _DimExpr) else (((), o),)


def _factor_size(f) -> int:
  if f[0] == "var":
    return 1
  return 1 + sum(_terms_size(_operand_terms(o)) for o in f[1:])


def _term_size(t) -> int:
  return sum(1 + p * _factor_size(f) for f, p in t)


def _terms_size(terms) -> int:
  return sum(1 + abs(k) * _term_size(t) for t, k in terms)


def _factor_cmp(a, b) -> int:
  if c := _cmp(_factor_size(a), _factor_size(b)):
    return c
  if a[0] == "var":
    return _cmp(a[1], b[1])
  if c := _cmp(a[0], b[0]):
    return c
  return _cmp_seq([_operand_terms(o) for o in a[1:]], [_operand_terms(o) for o in b[1:]],
                  _terms_cmp)


def _factor_power_cmp(fp1, fp2) -> int:
  return _factor_cmp(fp1[0], fp2[0]) or _cmp(fp1[1], fp2[1])


def _term_cmp(t1, t2) -> int:
  return _cmp(_term_size(t1), _term_size(t2)) or _cmp_seq(t1, t2, _factor_power_cmp)


def _term_coeff_cmp(tk1, tk2) -> int:
  return _term_cmp(tk1[0], tk2[0]) or _cmp(tk1[1], tk2[1])


def _terms_cmp(terms1, terms2) -> int:
  return (_cmp(_terms_size(terms1), _terms_size(terms2))
          or _cmp_seq(terms1, terms2, _term_coeff_cmp))


def _sorted_factors(factor_powers) -> tuple:
  return tuple(sorted(factor_powers, key=functools.cmp_to_key(_factor_power_cmp)))


def _factor_str(f) -> str:
  if f[0] == "var":
    return f[1]
  return f"{f[0]}({f[1]}, {f[2]})"


def _term_str(t) -> str:
  return "*".join(_factor_str(f) + (f"^{p}" if p != 1 else "") for f, p in t)


class _DimExpr:
  """A symbolic dimension: an integer polynomial over dimension variables (JAX's
  `_DimExpr`). Build them with `symbolic_shape`; combine them with ints by `+ - * // %`."""
  __slots__ = ("_terms", "_scope", "_hash")
  # NB: in dtype promotion a dimension is a weakly typed int (as the value `__jax_array__`
  # makes of it, and a Python int): `x / x.shape[0]` keeps float32.
  dtype = np.dtype(np.int64)
  weak_type = True

  def __init__(self, terms: Mapping, scope: SymbolicScope):
    self._terms = tuple(sorted(((t, k) for t, k in terms.items() if k != 0),
                               key=functools.cmp_to_key(_term_coeff_cmp), reverse=True))
    self._scope = scope
    self._hash = hash(self._terms)

  # -- construction

  @staticmethod
  def _make(terms: Mapping, scope: SymbolicScope) -> "_DimExpr | int":
    nz = {t: k for t, k in terms.items() if k != 0}
    if scope._rules:
      nz = {t: k for t, k in scope._normalize(nz).items() if k != 0}
    if not nz:
      return 0
    if list(nz) == [()]:
      return nz[()]
    return _DimExpr(nz, scope)

  @staticmethod
  def _var(name: str, scope: SymbolicScope) -> "_DimExpr | int":
    # NB: through the scope's equalities, as JAX's: with `c == 3`, `c` parses as 3
    return _DimExpr._make({((("var", name), 1),): 1}, scope)

  @property
  def scope(self) -> SymbolicScope:
    return self._scope

  def _dict(self) -> dict:
    return dict(self._terms)

  def _coerce(self, other) -> dict | None:
    if isinstance(other, _DimExpr):
      if other._scope is not self._scope:
        raise ValueError(f"Invalid mixing of symbolic scopes when using symbolic dimension "
                         f"'{self}' (scope {self._scope}) with '{other}' (scope "
                         f"{other._scope}).")
      return other._dict()
    if isinstance(other, (int, _np_integer())) and not isinstance(other, bool):
      return {(): int(other)} if int(other) else {}
    if isinstance(other, bool):
      return {(): int(other)} if other else {}
    return None

  # -- arithmetic

  # NB: as JAX's (and tracers'): NumPy scalars and arrays defer to the reflected operators
  # (`np.float32(2) * d` reaches `__rmul__` with the float32, not an object-array loop).
  __array_priority__ = 1000

  def _with_value(self, other, op):
    """`op(self as a value, other)` when `other` is no integer but a number or an array
    (JAX's rule: a dimension meeting a float, a NumPy or JAX array is `jnp.array(d)`), else
    NotImplemented."""
    if isinstance(other, (float, complex, np.number, np.ndarray)) or (
        hasattr(other, "shape") and hasattr(other, "dtype")):
      return op(self.__jax_array__(), other)
    return NotImplemented

  def __add__(self, other):
    o = self._coerce(other)
    if o is None:
      return self._with_value(other, lambda a, b: a + b)
    d = self._dict()
    for t, k in o.items():
      d[t] = d.get(t, 0) + k
    return _DimExpr._make(d, self._scope)

  def __radd__(self, other):
    if self._coerce(other) is None:
      return self._with_value(other, lambda a, b: b + a)
    return self.__add__(other)

  def __neg__(self):
    return _DimExpr._make({t: -k for t, k in self._terms}, self._scope)

  def __pos__(self):
    return self

  def __sub__(self, other):
    o = self._coerce(other)
    if o is None:
      return self._with_value(other, lambda a, b: a - b)
    d = self._dict()
    for t, k in o.items():
      d[t] = d.get(t, 0) - k
    return _DimExpr._make(d, self._scope)

  def __rsub__(self, other):
    o = self._coerce(other)
    if o is None:
      return self._with_value(other, lambda a, b: b - a)
    return (-self) + other

  def __mul__(self, other):
    o = self._coerce(other)
    if o is None:
      return self._with_value(other, lambda a, b: a * b)
    d: dict = {}
    for t1, k1 in self._terms:
      for t2, k2 in o.items():
        t = _mul_terms(t1, t2)
        d[t] = d.get(t, 0) + k1 * k2
    return _DimExpr._make(d, self._scope)

  def __rmul__(self, other):
    if self._coerce(other) is None:
      return self._with_value(other, lambda a, b: b * a)
    return self.__mul__(other)

  def __pow__(self, n):
    if not isinstance(n, int) or n < 0:
      raise _inconclusive(f"Symbolic dimension '{self}' raised to the power {n!r}: only "
                          f"non-negative int powers are supported.")
    out: Any = 1
    for _ in range(n):
      out = out * self
    return out

  def _divmod(self, divisor) -> tuple:
    """(quotient, remainder) of the division by an int or by a one-term expression."""
    if isinstance(divisor, _DimExpr):
      if divisor._scope is not self._scope:
        self._coerce(divisor)
      exact = self._exact_quotient(divisor)
      if exact is not None:
        return exact, 0
      # NB: as JAX's, a division by a symbolic dimension that is not exact is kept as the
      # atoms `floordiv(e, d)` and `mod(e, d)`
      return (_DimExpr._make({((("floordiv", self, divisor), 1),): 1}, self._scope),
              _DimExpr._make({((("mod", self, divisor), 1),): 1}, self._scope))
    k = int(divisor)
    if k == 0:
      raise ZeroDivisionError(f"Symbolic dimension '{self}' divided by 0.")
    if all(c % k == 0 for _, c in self._terms):
      return _DimExpr._make({t: c // k for t, c in self._terms}, self._scope), 0
    if all(c % k == 0 for t, c in self._terms if t):   # (2*b + 3) // 2 is b + 1, as JAX's
      c = dict(self._terms).get((), 0)
      q = _DimExpr._make({t: ck // k for t, ck in self._terms if t}, self._scope)
      return q + c // k, c % k
    if k == 1:
      return self, 0
    quot = _DimExpr._make({((("floordiv", self, k), 1),): 1}, self._scope)
    rem = _DimExpr._make({((("mod", self, k), 1),): 1}, self._scope)
    return quot, rem

  def _exact_quotient(self, divisor: "_DimExpr"):
    """`self / divisor` when a one-term `divisor` divides every term exactly, else None."""
    if len(divisor._terms) != 1:
      return None
    (dt, dk), = divisor._terms
    q: dict = {}
    for t, k in self._terms:
      t2 = _div_term(t, dt)
      if t2 is None or k % dk:
        return None
      q[t2] = k // dk
    return _DimExpr._make(q, self._scope)

  def __floordiv__(self, other):
    if not isinstance(other, (int, _DimExpr, _np_integer())):
      return NotImplemented
    return self._divmod(other)[0]

  def __rfloordiv__(self, other):
    if not isinstance(other, (int, _np_integer())):
      return NotImplemented
    if int(other) == 0:
      return 0
    return _DimExpr._make({((("floordiv", int(other), self), 1),): 1}, self._scope)

  def __mod__(self, other):
    if not isinstance(other, (int, _DimExpr, _np_integer())):
      return NotImplemented
    return self._divmod(other)[1]

  def __rmod__(self, other):
    if not isinstance(other, (int, _np_integer())):
      return NotImplemented
    if int(other) == 0:
      return 0
    return _DimExpr._make({((("mod", int(other), self), 1),): 1}, self._scope)

  def __rdivmod__(self, other):
    return self.__rfloordiv__(other), self.__rmod__(other)

  def __divmod__(self, other):
    return self._divmod(other)

  def __rtruediv__(self, other):
    r = self._with_value(other, lambda a, b: b / a)
    if r is NotImplemented and self._coerce(other) is not None:
      raise _inconclusive(f"Cannot divide '{other}' by the dimension '{self}'.")
    return r

  def __truediv__(self, other):
    r = self._with_value(other, lambda a, b: a / b)
    if r is not NotImplemented:
      return r
    if isinstance(other, _DimExpr) or (isinstance(other, int) and other != 0):
      q, r = self._divmod(other)
      if isinstance(r, int) and r == 0:
        return q
    raise _inconclusive(f"Cannot divide evenly the dimension '{self}' by '{other}'.")

  # -- comparisons

  def _bounds(self) -> tuple:
    return _bounds(self._dict(), self._scope)

  def _nonneg(self, diff, op: str, lhs, rhs) -> bool:
    """Whether `diff >= 0` for all values (True/False), else InconclusiveDimensionOperation."""
    r = _decide_nonneg(diff)
    if r is None:
      raise _inconclusive(f"Symbolic dimension comparison '{lhs}' {op} '{rhs}' is "
                          f"inconclusive.")
    return r

  def __ge__(self, other):
    if self._coerce(other) is None:
      return NotImplemented
    return self._nonneg(self - other, ">=", self, other)

  def __gt__(self, other):
    if self._coerce(other) is None:
      return NotImplemented
    return self._nonneg(self - other - 1, ">", self, other)

  def __le__(self, other):
    if self._coerce(other) is None:
      return NotImplemented
    return self._nonneg(other - self, "<=", self, other)

  def __lt__(self, other):
    if self._coerce(other) is None:
      return NotImplemented
    return self._nonneg(other - self - 1, "<", self, other)

  def __eq__(self, other):
    if isinstance(other, _DimExpr):
      return other._scope is self._scope and self._terms == other._terms
    if isinstance(other, (int, _np_integer())) and not isinstance(other, bool):
      return False
    return NotImplemented

  def __ne__(self, other):
    r = self.__eq__(other)
    return r if r is NotImplemented else not r

  def __hash__(self):
    return self._hash

  # -- conversions

  def __int__(self):
    raise _inconclusive(f"Symbolic dimension '{self}' used in a context that requires a "
                        f"constant")

  # NB: no `__index__` and no `__float__`, as JAX's `_DimExpr`: `operator.index(d)`,
  # `range(d)`, `float(d)` raise TypeError ("'_DimExpr' object cannot be interpreted as an
  # integer"), which callers that accept ints or symbolic dimensions rely on

  def __bool__(self):
    return True   # a dimension expression is a non-zero object (its value may be anything)

  def __jax_array__(self):
    """The dimension as a traced int scalar (int32, int64 under x64), as JAX's: used where a
    dimension meets an array (`x / x.shape[0]`, `jnp.arange(x.shape[0])`)."""
    if dimension_as_value_hook is None:
      raise _inconclusive(f"Symbolic dimension '{self}' used as a value before "
                          f"stagecraft.lax is imported")
    return dimension_as_value_hook(self)

  def __str__(self):
    out = []
    for t, k in self._terms:
      if t:
        mag = abs(k)
        s = _term_str(t) if mag == 1 else f"{mag}*{_term_str(t)}"
      else:
        s = str(abs(k))
      if not out:
        out.append(s if k > 0 else f"- {s}")
      else:
        out.append(f"+ {s}" if k > 0 else f"- {s}")
    return " ".join(out)

  __repr__ = __str__

  def __reduce__(self):
    raise TypeError("symbolic dimensions are not picklable; serialize an Exported instead.")

  # -- queries

  def get_vars(self) -> set:
    """The names of the variables in this expression."""
    out: set = set()
    for t, _ in self._terms:
      for f, _ in t:
        out |= _factor_vars(f)
    return out

  def evaluate(self, env: Mapping[str, Any], *, add: Callable = None, mul: Callable = None,
               const: Callable = None, floordiv: Callable = None, mod: Callable = None,
               max: Callable = None, min: Callable = None):   # noqa: A002
    """The value of the expression for `env` (variable name -> value). By default values
    are Python ints; the callables let a lowering compute it with ops on runtime values
    (`const(int)` makes a value, `add`/`mul`/`max`/`min` combine two, `floordiv`/`mod`
    take a value and a divisor: an int, or a value for a symbolic divisor)."""
    add = add or (lambda a, b: a + b)
    mul = mul or (lambda a, b: a * b)
    const = const or (lambda c: c)
    floordiv = floordiv or (lambda a, k: a // k)
    mod = mod or (lambda a, k: a % k)
    max_ = max or _builtin_max
    min_ = min or _builtin_min
    ops = dict(add=add, mul=mul, const=const, floordiv=floordiv, mod=mod, max=max_, min=min_)

    def ev(e):
      return e.evaluate(env, **ops) if isinstance(e, _DimExpr) else const(int(e))

    def factor(f):
      if f[0] == "var":
        if f[1] not in env:
          raise KeyError(f"no value for the dimension variable {f[1]!r}")
        return env[f[1]]
      x = ev(f[1])
      if f[0] in ("max", "min"):
        return (max_ if f[0] == "max" else min_)(x, ev(f[2]))
      k = ev(f[2]) if isinstance(f[2], _DimExpr) else f[2]
      return floordiv(x, k) if f[0] == "floordiv" else mod(x, k)

    total = None
    for t, k in self._terms:
      v = None
      for f, p in t:
        fv = factor(f)
        for _ in range(p):
          v = fv if v is None else mul(v, fv)
      v = const(k) if v is None else (v if k == 1 else mul(const(k), v))
      total = v if total is None else add(total, v)
    return total


def _decide_nonneg(diff, depth: int = 0) -> bool | None:
  """Whether `diff >= 0` for all values of the variables: True, False (`diff < 0` for all),
  or None when that depends on them.

  Decided from interval bounds, the scope's constraints, floor divisions replaced by their
  definition, and for a term `k*max(e1, e2)` (or `min`) by cases: `diff` is then
  `max(d1, d2)` or `min(d1, d2)` with `d1`, `d2` the expression with `e1`, `e2` in place
  of the term."""
  if isinstance(diff, int):
    return diff >= 0
  lo, hi = diff._bounds()
  if lo >= 0:
    return True
  if hi < 0:
    return False
  for p in diff._scope._polys:   # diff >= p >= 0
    d2 = diff - p
    if isinstance(d2, int):
      if d2 >= 0:
        return True
      continue
    if d2._bounds()[0] >= 0:
      return True
  # k*floordiv(e, k) = e - mod(e, k): bounds of k*diff with the quotients replaced
  d2 = diff
  for _ in range(3):
    d2 = _without_floordiv(d2)
    if d2 is None:
      break
    if isinstance(d2, int):
      return d2 >= 0
    lo, hi = d2._bounds()
    if lo >= 0:
      return True
    if hi < 0:
      return False
  if depth >= 6:
    return None
  # 0 <= mod(x, d) <= d - 1 for a symbolic d >= 1: lower and upper expressions of `diff`
  bounded = _mod_bounded(diff)
  if bounded is not None:
    low, high = bounded
    if _decide_nonneg(low, depth + 1):
      return True
    if _decide_nonneg(-high - 1, depth + 1):
      return False
  for t, k in diff._terms:
    if len(t) != 1 or t[0][1] != 1 or t[0][0][0] not in ("max", "min"):
      continue
    f = t[0][0]
    rest = diff - k * _DimExpr._make({t: 1}, diff._scope)
    s1 = _decide_nonneg(rest + k * f[1], depth + 1)
    s2 = _decide_nonneg(rest + k * f[2], depth + 1)
    if (k > 0) == (f[0] == "max"):   # diff = max(d1, d2)
      if s1 or s2:
        return True
      if s1 is False and s2 is False:
        return False
    else:                            # diff = min(d1, d2)
      if s1 and s2:
        return True
      if s1 is False or s2 is False:
        return False
    return None
  return None


def _max_min(op: str, d1, d2):
  d1 = d1 if is_symbolic_dim(d1) else operator.index(d1)
  d2 = d2 if is_symbolic_dim(d2) else operator.index(d2)
  if not is_symbolic_dim(d1) and not is_symbolic_dim(d2):
    return max(d1, d2) if op == "max" else min(d1, d2)
  e = d1 if is_symbolic_dim(d1) else d2
  e._coerce(d2 if e is d1 else d1)   # the same scope
  if _decide_nonneg(d1 - d2):
    return d1 if op == "max" else d2
  if _decide_nonneg(d2 - d1):
    return d2 if op == "max" else d1
  return _DimExpr._make({(((op, d1, d2), 1),): 1}, e._scope)


def max_dim(d1, d2):
  """`max(d1, d2)` of two dimensions, ints or symbolic (JAX's `core.max_dim`): one of them
  when the bounds decide which is larger (`max_dim(b, 1)` is `b`), else the expression
  `max(d1, d2)`."""
  return _max_min("max", d1, d2)


def min_dim(d1, d2):
  """`min(d1, d2)` of two dimensions, ints or symbolic (JAX's `core.min_dim`): one of them
  when the bounds decide which is smaller, else the expression `min(d1, d2)`."""
  return _max_min("min", d1, d2)


def canonicalize_slice(s: slice, axis_size) -> tuple:
  """(start, step, size) of `x[s]` along an axis of size `axis_size`, int or symbolic (JAX's
  `core.canonicalize_slice`): `slice.indices` with the clamping to the axis expressed with
  `max_dim`/`min_dim`, and size `max(0, distance + |step| - 1) // |step|`.

  Raises:
    ValueError: a zero step.
    InconclusiveDimensionOperation: a symbolic start, stop or step whose sign is not
      decided by its bounds (JAX's message).
  """
  def as_index(d):
    return d if is_symbolic_dim(d) else operator.index(d)

  step = 1 if s.step is None else as_index(s.step)
  try:
    if step == 0:
      raise ValueError("slice step cannot be zero")
    step_gt_0 = step > 0
  except InconclusiveDimensionOperation as e:
    raise InconclusiveDimensionOperation(
        f"In slice with non-constant elements the step ({step}) must be resolved statically "
        f"if it is > 0 or < 0.\nDetails: {e}") from None

  def clamp(i, which: str):
    try:
      i_ge_0 = i >= 0
    except InconclusiveDimensionOperation as e:
      raise InconclusiveDimensionOperation(
          f"In slice with non-constant elements the {which} ({i}) must be resolved "
          f"statically if it is >= 0.\nDetails: {e}") from None
    if i_ge_0:
      return min_dim(axis_size, i) if step_gt_0 else min_dim(axis_size - 1, i)
    return max_dim(0, axis_size + i) if step_gt_0 else max_dim(-1, axis_size + i)

  start = ((0 if step_gt_0 else axis_size - 1) if s.start is None
           else clamp(as_index(s.start), "start"))
  stop = ((axis_size if step_gt_0 else -1) if s.stop is None
          else clamp(as_index(s.stop), "stop"))
  gap = step if step_gt_0 else -step
  distance = stop - start if step_gt_0 else start - stop
  return start, step, max_dim(0, distance + gap - 1) // gap


def _without_floordiv(e: "_DimExpr"):
  """`k*e` with one atom `floordiv(x, k)` (in terms of degree 1 in it) replaced by
  `x - mod(x, k)`: an expression of the same sign with better bounds; None if `e` has no
  such atom."""
  f = next((f for t, _ in e._terms for f, p in t if f[0] == "floordiv" and p == 1 and
            isinstance(f[2], int) and f[2] > 0), None)
  if f is None:
    return None
  x, k = f[1], f[2]
  out: Any = 0
  for t, c in e._terms:
    if any(g == f and p != 1 for g, p in t):
      return None
    rest = tuple((g, p) for g, p in t if g != f)
    rest_e = _DimExpr._make({rest: 1}, e._scope)
    out = out + (c * rest_e * (x - x % k) if len(rest) != len(t) else k * c * rest_e)
  return out


def _mod_bounded(e: "_DimExpr"):
  """(lower, upper) expressions of `e` with each term `c*mod(x, d)` (a symbolic `d` >= 1)
  replaced by its bound, 0 or `c*(d - 1)`; None if `e` has no such term."""
  low: Any = 0
  high: Any = 0
  found = False
  for t, c in e._terms:
    term = _DimExpr._make({t: c}, e._scope)
    if (len(t) == 1 and t[0][1] == 1 and t[0][0][0] == "mod"
        and isinstance(t[0][0][2], _DimExpr) and t[0][0][2]._bounds()[0] >= 1):
      found = True
      top = c * (t[0][0][2] - 1)
      low, high = (low, high + top) if c > 0 else (low + top, high)
    else:
      low, high = low + term, high + term
  return (low, high) if found else None


def _factor_vars(f) -> set:
  if f[0] == "var":
    return {f[1]}
  out: set = set()
  for o in f[1:]:
    if isinstance(o, _DimExpr):
      out |= o.get_vars()
  return out


_builtin_max, _builtin_min = max, min


def _mul_terms(t1, t2):
  d = dict(t1)
  for f, p in t2:
    d[f] = d.get(f, 0) + p
  return _sorted_factors(d.items())


def _div_term(t, dt):
  d = dict(t)
  for f, p in dt:
    if d.get(f, 0) < p:
      return None
    d[f] -= p
  return _sorted_factors((f, p) for f, p in d.items() if p)


def _operand_bounds(o) -> tuple:
  return (o, o) if isinstance(o, int) else o._bounds()


def _factor_bounds(f, scope) -> tuple:
  if f[0] == "var":
    return scope.var_bounds(f[1])
  if f[0] in ("max", "min"):
    (lo1, hi1), (lo2, hi2) = _operand_bounds(f[1]), _operand_bounds(f[2])
    pick = max if f[0] == "max" else min
    return pick(lo1, lo2), pick(hi1, hi2)
  lo, hi = (f[1], f[1]) if isinstance(f[1], int) else f[1]._bounds()
  k = f[2]
  if isinstance(k, _DimExpr):
    return _symbolic_division_bounds(f[0], lo, hi, *k._bounds())
  if f[0] == "mod":
    return (0, k - 1) if k > 0 else (k + 1, 0)
  if k > 0:
    return (math.floor(lo / k) if lo != -_INF else -_INF,
            math.floor(hi / k) if hi != _INF else _INF)
  return (-_INF, _INF)


def _symbolic_division_bounds(op: str, lo, hi, dlo, dhi) -> tuple:
  """Bounds of `floordiv(x, d)` / `mod(x, d)` for `x` in [lo, hi] and a symbolic `d` in
  [dlo, dhi] (unbounded when `d` may be 0 or negative)."""
  if dlo <= 0:
    return (-_INF, _INF)
  if op == "mod":
    return (0, dhi - 1 if dhi != _INF else _INF)

  def fdiv(x, d):   # floor(x / d) for d >= 1, x finite or infinite
    if x in (_INF, -_INF):
      return x
    if d == _INF:
      return 0 if x >= 0 else -1
    return math.floor(x / d)
  return (min(fdiv(lo, dlo), fdiv(lo, dhi)), max(fdiv(hi, dlo), fdiv(hi, dhi)))


def _imul(a, b):
  if a == 0 or b == 0:
    return 0
  return a * b


def _bounds(terms: Mapping, scope) -> tuple:
  """Interval bounds [lo, hi] of a polynomial."""
  lo = hi = 0
  for t, k in terms.items():
    tlo = thi = 1
    for f, p in t:
      flo, fhi = _factor_bounds(f, scope)
      for _ in range(p):
        cands = [_imul(tlo, flo), _imul(tlo, fhi), _imul(thi, flo), _imul(thi, fhi)]
        tlo, thi = min(cands), max(cands)
    lo += min(_imul(k, tlo), _imul(k, thi))
    hi += max(_imul(k, tlo), _imul(k, thi))
  return lo, hi


def _np_integer():
  return np.integer


# ---------------------------------------------------------------------------
# Parsing

_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_][A-Za-z0-9_]*)|(//|\*\*|[-+*%()^,]))")


def _tokens(s: str) -> list:
  out, pos = [], 0
  s = s.rstrip()
  while pos < len(s):
    m = _TOKEN.match(s, pos)
    if m is None or m.end() == pos:
      raise ValueError(f"unexpected character {s[pos:].strip()[:1]!r}")
    num, name, op = m.groups()
    out.append(("num", int(num)) if num is not None else
               ("name", name) if name is not None else ("op", op))
    pos = m.end()
  return out


def _parse(s: str, scope: SymbolicScope):
  """Parses one dimension expression (`b`, `2*b + 1`, `floordiv(b, 2)`, `b^2`)."""
  toks = _tokens(s)
  pos = [0]

  def peek():
    return toks[pos[0]] if pos[0] < len(toks) else (None, None)

  def take(kind=None, val=None):
    t = peek()
    if t[0] is None or (kind and t[0] != kind) or (val is not None and t[1] != val):
      want = val if val is not None else kind
      raise ValueError(f"expected {want!r}, found {t[1]!r}" if t[0] else
                       f"expected {want!r} at the end")
    pos[0] += 1
    return t

  def expr():
    t = peek()
    neg = False
    if t == ("op", "-"):
      take()
      neg = True
    elif t == ("op", "+"):
      take()
    v = term()
    v = -v if neg else v
    while peek() in (("op", "+"), ("op", "-")):
      op = take()[1]
      r = term()
      v = v + r if op == "+" else v - r
    return v

  def term():
    v = power()
    while peek() in (("op", "*"), ("op", "//"), ("op", "%")):
      op = take()[1]
      r = power()
      v = v * r if op == "*" else v // r if op == "//" else v % r
    return v

  def power():
    v = atom()
    if peek() in (("op", "^"), ("op", "**")):
      take()
      n = take("num")[1]
      v = v ** n if isinstance(v, _DimExpr) else int(v) ** n
    return v

  def atom():
    t = peek()
    if t[0] == "num":
      take()
      return t[1]
    if t[0] == "name":
      take()
      if peek() == ("op", "(") and t[1] in ("floordiv", "mod", "max", "min"):
        take()
        a = expr()
        take("op", ",")
        b = expr()
        take("op", ")")
        if t[1] in ("max", "min"):
          return max_dim(a, b) if t[1] == "max" else min_dim(a, b)
        return a // b if t[1] == "floordiv" else a % b
      return _DimExpr._var(t[1], scope)
    if t == ("op", "("):
      take()
      v = expr()
      take("op", ")")
      return v
    raise ValueError(f"unexpected {t[1]!r}" if t[0] else "unexpected end")

  v = expr()
  if pos[0] != len(toks):
    raise ValueError(f"unexpected {peek()[1]!r}")
  return v


def parse_dim(s: str, scope: SymbolicScope | None = None):
  """One dimension expression from its text (an int when it is constant)."""
  return _parse(s, scope or _DEFAULT_SCOPE)


def _split_top(spec: str) -> list:
  parts, depth, cur = [], 0, []
  for ch in spec:
    if ch == "(":
      depth += 1
    elif ch == ")":
      depth -= 1
    if ch == "," and depth == 0:
      parts.append("".join(cur))
      cur = []
    else:
      cur.append(ch)
  parts.append("".join(cur))
  return parts


def symbolic_shape(shape_spec: str | None, *, constraints: Sequence[str] = (),
                   scope: SymbolicScope | None = None,
                   like: Sequence[int | None] | None = None) -> tuple:
  """Parses a shape specification such as `"b, 4"` or `"(b, 2*b + 1)"` (JAX's
  `symbolic_shape`).

  Args:
    shape_spec: comma-separated dimension expressions; `_` takes the dimension of `like`;
      `...` stands for the remaining dimensions of `like`; None or "" for a scalar (or
      `like`'s shape).
    constraints: inequality constraints for a new scope (see `SymbolicScope`).
    scope: the scope (default: a new one with `constraints`).
    like: a concrete shape the specification is matched against.

  Returns:
    A tuple with an int per constant dimension and a `_DimExpr` per other one.

  Raises:
    ValueError: a malformed specification, or one whose rank differs from `like`, or both
      `constraints` and `scope` given.
  """
  if scope is not None and constraints:
    raise ValueError("Cannot specify both a `scope` and `constraints`.")
  scope = scope or SymbolicScope(constraints)
  if shape_spec is None:
    return tuple(like) if like is not None else ()
  if not isinstance(shape_spec, str):
    raise ValueError(f"polymorphic shape {shape_spec!r} must be a string")
  spec = shape_spec.strip()
  if spec.startswith("(") and spec.endswith(")") and _balanced(spec[1:-1]):
    spec = spec[1:-1]
  parts = [p.strip() for p in _split_top(spec)] if spec.strip() else []
  if parts and parts[-1] == "":
    parts = parts[:-1]
  if "..." in parts:
    i = parts.index("...")
    if i != len(parts) - 1 or like is None:
      raise ValueError(f"syntax error in polymorphic shape {shape_spec!r}: '...' must be "
                       f"last and needs `like`.")
    n_rest = len(like) - i
    if n_rest < 0:
      raise ValueError(f"syntax error in polymorphic shape {shape_spec!r}: rank mismatch "
                       f"with {tuple(like)}.")
    parts = parts[:i] + ["_"] * n_rest
  if like is not None and len(like) != len(parts):
    raise ValueError(f"syntax error in polymorphic shape {shape_spec!r}: rank mismatch, the "
                     f"shape has rank {len(parts)} but `like` {tuple(like)} has rank "
                     f"{len(like)}.")
  out = []
  for i, p in enumerate(parts):
    if p == "_":
      if like is None or like[i] is None:
        raise ValueError(f"syntax error in polymorphic shape {shape_spec!r}: '_' in "
                         f"dimension {i} needs a known dimension in `like`.")
      out.append(int(like[i]))
      continue
    try:
      d = _parse(p, scope) if p else None
    except ValueError as e:
      raise ValueError(f"syntax error in polymorphic shape {shape_spec!r} in dimension "
                       f"{i}: {e}") from None
    if d is None:
      raise ValueError(f"syntax error in polymorphic shape {shape_spec!r} in dimension "
                       f"{i}: empty dimension.")
    if isinstance(d, int) and d < 0:
      raise ValueError(f"syntax error in polymorphic shape {shape_spec!r} in dimension "
                       f"{i}: negative dimension {d}.")
    if like is not None and like[i] is not None and isinstance(d, int) and d != like[i]:
      raise ValueError(f"syntax error in polymorphic shape {shape_spec!r} in dimension "
                       f"{i}: {d} does not match the known dimension {like[i]}.")
    out.append(d)
  return tuple(out)


def _balanced(s: str) -> bool:
  depth = 0
  for ch in s:
    depth += ch == "("
    depth -= ch == ")"
    if depth < 0:
      return False
  return depth == 0


def is_symbolic_dim(p: Any) -> bool:
  """Whether `p` is a symbolic dimension (a `_DimExpr`)."""
  return type(p) is _DimExpr


def index_dim(d: Any) -> Any:
  """`d` as a Python int (`operator.index`), or `d` itself when it is a symbolic dimension.

  Raises:
    TypeError: if `d` is neither an integer nor a symbolic dimension."""
  return d if type(d) is _DimExpr else operator.index(d)


def is_constant_dim(d: Any) -> bool:
  """Whether `d` is a concrete (int) dimension."""
  return type(d) is not _DimExpr


def is_constant_shape(shape: Sequence) -> bool:
  """Whether every dimension of `shape` is concrete."""
  return not any(type(d) is _DimExpr for d in shape)


def prod(shape: Sequence) -> Any:
  """The product of the dimensions of `shape` (an int or a dimension expression)."""
  out: Any = 1
  for d in shape:
    out = out * d
  return out


def dim_vars(shapes: Sequence[Sequence]) -> list:
  """The sorted names of the variables in `shapes`' symbolic dimensions."""
  out: set = set()
  for s in shapes:
    for d in s:
      if type(d) is _DimExpr:
        out |= d.get_vars()
  return sorted(out)
