"""Linear-algebra primitives (JAX's `lax.linalg`): `cholesky`, `lu`, `geqrf`,
`householder_product`, `eigh`, `svd` and `triangular_solve`, each over the trailing two
dimensions with any leading batch dimensions.

On CPU the decompositions lower, as JAX's do, to `stablehlo.custom_call`s of the LAPACK
kernels that jaxlib registers with XLA (typed FFI, api_version 4: `lapack_spotrf_ffi`,
`lapack_sgetrf_ffi`, ...); their operands and results use column-major matrix layouts, set
with `operand_layouts`/`result_layouts`. A factorization that fails (LAPACK's `info != 0`)
gives NaNs, as in JAX. `triangular_solve` lowers to `stablehlo.triangular_solve`, which XLA
expands on every backend. Supported dtypes: float32, float64, complex64, complex128. Other
platforms (cuSOLVER) are not implemented.

`qr` is a primitive, as in JAX, so that it is differentiated as a whole (JAX's `qr_jvp_rule`);
it lowers to geqrf and householder_product. `lu_pivots_to_permutation` and the permutation
output of `lu` are compositions here (JAX has a third `lu_p` output computed with a loop,
which needs control flow).

Derivatives follow JAX: JVP rules for cholesky, eigh, lu, qr, svd and triangular_solve
(whose transpose in `b` is another triangular solve); geqrf and householder_product are not
differentiable, as in JAX (differentiate `qr` instead).
"""
from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

from stagecraft import core, dtypes
from stagecraft.core import Primitive, ShapedArray
from stagecraft.interpreters import ad, batching, lowering
from stagecraft.interpreters import partial_eval as pe
from stagecraft.interpreters.lowering import ir_type
from stagecraft.lax import elementwise as ew
from stagecraft.lax import reduction, shape
from stagecraft.lax.dot import Precision, dot_general
from stagecraft.lax.elementwise import emit_compare

__all__ = ["cholesky_p", "lu_p", "geqrf_p", "householder_product_p", "qr_p", "eigh_p", "svd_p",
           "triangular_solve_p", "cholesky", "lu", "lu_pivots_to_permutation", "geqrf",
           "householder_product", "qr", "eigh", "svd", "triangular_solve"]

_LAPACK_PREFIX = {dtypes.float32: "s", dtypes.float64: "d", dtypes.complex64: "c",
                  dtypes.complex128: "z"}
_real_of = {dtypes.complex64: dtypes.float32, dtypes.complex128: dtypes.float64}


# ---------------------------------------------------------------------------
# Shared checks and emitters


def _check_matrix(name: str, x: ShapedArray, square: bool = False) -> None:
  if x.dtype not in _LAPACK_PREFIX:
    raise TypeError(f"{name} does not accept dtype {x.dtype.name}. Accepted dtypes are "
                    f"float32, float64, complex64 and complex128 (convert first, e.g. with "
                    f"astype(jnp.float32)).")
  if x.ndim < 2:
    raise ValueError(f"{name} requires an array of rank >= 2 (a batch of matrices), got "
                     f"{x.str_short()}.")
  if square and x.shape[-1] != x.shape[-2]:
    raise ValueError(f"{name} requires square matrices, got {x.str_short()}.")


_lapack_ready = [False]


def _ensure_lapack() -> None:
  """Loads the LAPACK function pointers (from scipy) that jaxlib's CPU kernels call.

  NB: the kernels themselves are registered with XLA as FFI custom-call targets when the
  runtime package is imported (stagecraft.runtime.client imports it), so only the function
  pointers need loading here, once."""
  if _lapack_ready[0]:
    return
  from jaxlib.cpu import _lapack
  _lapack.initialize()
  _lapack_ready[0] = True


def _layout(aval: ShapedArray, nb: int) -> str:
  """Column-major for matrices (rank nb + 2: rows, columns, then the batch dims from the
  last), row-major for everything else (vectors and per-matrix scalars)."""
  r = aval.ndim
  dims = [r - 2, r - 1, *range(r - 3, -1, -1)] if r == nb + 2 else list(range(r - 1, -1, -1))
  if not dims:
    return "dense<> : tensor<0xindex>"
  return f"dense<[{', '.join(map(str, dims))}]> : tensor<{r}xindex>"


def _lapack_call(ctx, fn: str, operands, operand_avals, result_avals, config: dict[str, int],
                 aliases: dict[int, int]):
  """A typed-FFI custom call of jaxlib's `lapack_<p><fn>_ffi`; `config` holds ui8
  attributes (LAPACK's character flags), `aliases` maps result to operand indices."""
  if ctx.module.platform != "cpu":
    raise NotImplementedError(f"lax.linalg: the {fn} decomposition is implemented for CPU "
                              f"(LAPACK) only, not for platform {ctx.module.platform!r}.")
  _ensure_lapack()
  target = f"lapack_{_LAPACK_PREFIX[operand_avals[0].dtype]}{fn}_ffi"
  cfg = ", ".join(f"{k} = {int(v)} : ui8" for k, v in config.items())
  alias = ", ".join(
      f"#stablehlo.output_operand_alias<output_tuple_indices = "
      f"[{r}], operand_index = {o}, operand_tuple_indices = []>" if len(result_avals) > 1 else
      f"#stablehlo.output_operand_alias<output_tuple_indices = [], operand_index = {o}, "
      f"operand_tuple_indices = []>" for r, o in aliases.items())
  nb = operand_avals[0].ndim - 2
  attrs = (f'call_target_name = "{target}", api_version = 4 : i32, '
           f"backend_config = {{{cfg}}}, "
           f"operand_layouts = [{', '.join(_layout(a, nb) for a in operand_avals)}], "
           f"result_layouts = [{', '.join(_layout(a, nb) for a in result_avals)}], "
           f"output_operand_aliases = [{alias}]")
  return ctx.op("stablehlo.custom_call", list(operands), result_avals, attrs=attrs,
                operand_avals=operand_avals)


def _bcast(ctx, x, aval: ShapedArray, out: ShapedArray, dims) -> str:
  if aval.shape == out.shape:
    return x
  return ctx.op("stablehlo.broadcast_in_dim", [x], [out.update(dtype=aval.dtype)],
                attrs=f"broadcast_dimensions = {lowering.i64_array(dims)}",
                operand_avals=[aval])[0]


def _select(ctx, pred, a, b, aval: ShapedArray) -> str:
  r = ctx.fb.fresh()
  ctx.fb.emit(f"{r} = stablehlo.select {pred}, {a}, {b} : "
              f"{ir_type(aval.update(dtype=dtypes.bool_))}, {ir_type(aval)}")
  return r


def _nan_if_failed(ctx, info: str, info_aval: ShapedArray, x: str, aval: ShapedArray,
                   direction: str = "EQ") -> str:
  """x where `info <direction> 0` (per batch element), else NaN."""
  ok = emit_compare(ctx, direction, info, ctx.constant(0, info_aval), info_aval)
  ok = _bcast(ctx, ok, info_aval.update(dtype=dtypes.bool_), aval.update(dtype=dtypes.bool_),
              tuple(range(info_aval.ndim)))
  return _select(ctx, ok, x, ctx.constant(np.nan, aval), aval)


def _triangle_mask(ctx, aval: ShapedArray, lower: bool) -> str:
  """bool mask of the lower (row >= col) or upper (row <= col) triangle, shaped like aval."""
  idx = aval.update(dtype=dtypes.int32)
  rows = ctx.op("stablehlo.iota", [], [idx], attrs=f"iota_dimension = {aval.ndim - 2} : i64",
                operand_avals=[])[0]
  cols = ctx.op("stablehlo.iota", [], [idx], attrs=f"iota_dimension = {aval.ndim - 1} : i64",
                operand_avals=[])[0]
  return emit_compare(ctx, "GE" if lower else "LE", rows, cols, idx)


def _batch(aval: ShapedArray) -> tuple[int, ...]:
  return aval.shape[:-2]


def _inline(ctx, fun, avals, args) -> list[str]:
  """Emits the lowering of `fun(*avals)` (a composition of stagecraft.lax ops, traced to a
  jaxpr) at the current point of `ctx`'s function; returns its outputs' names."""
  jaxpr, consts = pe.trace_to_jaxpr(lambda *xs: list(fun(*xs)), list(avals))
  const_names = []
  for c in consts:
    c = np.asarray(c)
    name = ctx.fb.fresh()
    ctx.fb.emit(f"{name} = stablehlo.constant {lowering.dense_array(c)} : "
                f"{ir_type(ShapedArray(c.shape, c.dtype))}")
    const_names.append(name)
  return lowering.jaxpr_subcomp(ctx.fb, jaxpr, const_names, list(args))


# ---------------------------------------------------------------------------
# Matrix helpers for the derivative rules (written with stagecraft.lax, so that the rules
# themselves are differentiable: higher-order derivatives differentiate them again).


def _shape_of(x) -> tuple[int, ...]:
  return core.get_aval(x).shape


def _dtype_of(x) -> np.dtype:
  return core.get_aval(x).dtype


def _T(x):
  """Transposes the trailing two axes."""
  nd = len(_shape_of(x))
  return shape.transpose(x, (*range(nd - 2), nd - 1, nd - 2))


def _H(x):
  """The conjugate transpose of the trailing two axes."""
  xt = _T(x)
  return ew.conj(xt) if dtypes.is_complex(_dtype_of(x)) else xt


def _mm(a, b):
  """Batched matrix product `a[..., m, k] @ b[..., k, n]` at full precision."""
  nb = len(_shape_of(a)) - 2
  batch = tuple(range(nb))
  return dot_general(a, b, (((nb + 1,), (nb,)), (batch, batch)),
                     precision=(Precision.HIGHEST, Precision.HIGHEST))


# ---------------------------------------------------------------------------
# Batching: the decompositions already accept leading batch dims, so a vmapped axis among
# them stays where it is; one among the matrix (vector) dims moves to the front.


def _leading_bdims(args, dims, cores):
  """Operands aligned at one batch dim among their leading (batch) dims, each operand's
  trailing `cores[i]` dims being its matrix/vector dims: kept in place when every batched
  operand has it at the same leading position (unbatched ones are broadcast there), else all
  moved (or broadcast) to the front."""
  size = next(_shape_of(x)[d] for x, d in zip(args, dims) if d is not None)
  kept = {d for d in dims if d is not None}
  if len(kept) == 1:
    d = kept.pop()
    # batched operands: d among their batch dims; unbatched ones: d a place to insert one
    if all(d < len(_shape_of(x)) - c if dx is not None else d <= len(_shape_of(x)) - c
           for x, dx, c in zip(args, dims, cores)):
      return [batching.matchaxis(x, dx, d, size) for x, dx in zip(args, dims)], d
  return [batching.bdim_at_front(x, d, size) for x, d in zip(args, dims)], 0


def _linalg_batch_rule(prim, cores, batched_args, batch_dims, **params):
  args, bdim = _leading_bdims(batched_args, batch_dims, cores)
  out = prim.bind(*args, **params)
  return (out, [bdim] * len(out)) if prim.multiple_results else (out, bdim)


def _defbatching(prim, *cores):
  """Registers the leading-batch-dim rule for `prim`, whose operand `i` has `cores[i]`
  trailing non-batch dims."""
  batching.primitive_batchers[prim] = partial(_linalg_batch_rule, prim, cores)


def _matrix_const(c: np.ndarray, shp: tuple[int, ...], dtype) -> Any:
  """The host matrix `c` (shape `shp[-2:]`) broadcast over the batch dims of `shp`."""
  c = np.asarray(c, dtype)
  if c.shape == tuple(shp):
    return c
  nd = len(shp)
  return shape.broadcast_in_dim(c, tuple(shp), (nd - 2, nd - 1))


def _tri(x, k: int, lower: bool):
  """`x` with the entries outside the lower (`j - i <= k`) or upper (`j - i >= k`) triangle
  set to zero (numpy's tril/triu over the trailing two axes)."""
  shp = _shape_of(x)
  m, n = shp[-2:]
  mask = np.tri(m, n, k, dtype=bool) if lower else ~np.tri(m, n, k - 1, dtype=bool)
  if mask.all():
    return x
  return ew.select(_matrix_const(mask, shp, np.bool_), x, shape.full(shp, 0, _dtype_of(x)))


def _tril(x, k: int = 0):
  return _tri(x, k, True)


def _triu(x, k: int = 0):
  return _tri(x, k, False)


def _eye_like(shp, dtype):
  return _matrix_const(np.eye(shp[-2], shp[-1]), tuple(shp), dtype)


def _extract_diagonal(x):
  """The diagonal `[..., n]` of square matrices `x[..., n, n]` (linear in x)."""
  shp = _shape_of(x)
  return reduction.reduce_sum(ew.mul(x, _eye_like(shp, _dtype_of(x))), (len(shp) - 1,))


def _rows(v, n: int):
  """`v[..., k]` broadcast to `[..., n, k]`: entry `[i, j]` is `v[j]` (NumPy's v[..., None, :])."""
  shp = _shape_of(v)
  nb = len(shp) - 1
  return shape.broadcast_in_dim(v, (*shp[:-1], n, shp[-1]), (*range(nb), nb + 1))


def _cols(v, n: int):
  """`v[..., k]` broadcast to `[..., k, n]`: entry `[i, j]` is `v[i]` (v[..., :, None])."""
  shp = _shape_of(v)
  nb = len(shp) - 1
  return shape.broadcast_in_dim(v, (*shp[:-1], shp[-1], n), tuple(range(nb + 1)))


def _astype(x, dtype):
  return x if _dtype_of(x) == dtype else ew.convert_element_type(x, dtype)


def _real_part(x):
  return ew.real(x) if dtypes.is_complex(_dtype_of(x)) else x


# ---------------------------------------------------------------------------
# cholesky: the lower Cholesky factor L of a Hermitian positive-definite matrix (potrf).


def _cholesky_abstract_eval(x: ShapedArray):
  _check_matrix("cholesky", x, square=True)
  return x.strip_weak_type()


def _cholesky_lowering(ctx, x):
  aval, = ctx.avals_out
  info_aval = ShapedArray(_batch(aval), dtypes.int32)
  if aval.shape[-1] == 0:
    return [x]
  f, info = _lapack_call(ctx, "potrf", [x], [aval], [aval, info_aval],
                         {"uplo": ord("L")}, {0: 0})
  f = _nan_if_failed(ctx, info, info_aval, f, aval)
  # NB: potrf leaves the strict upper triangle untouched; zero it.
  return [_select(ctx, _triangle_mask(ctx, aval, True), f, ctx.constant(0, aval), aval)]


def _cholesky_jvp(primals, tangents):
  """JAX's rule (Murray, "Differentiation of the Cholesky decomposition", arXiv:1602.07527):
  `dL = L phi(L^-1 dA L^-H)`, phi taking the lower triangle with the diagonal halved."""
  x, = primals
  t, = tangents
  L = cholesky_p.bind(x)
  shp = _shape_of(x)
  n = shp[-1]
  phi = _matrix_const(np.tri(n, n) - 0.5 * np.eye(n), shp, _dtype_of(x))
  tmp = triangular_solve(L, t, left_side=False, transpose_a=True, conjugate_a=True, lower=True)
  inner = triangular_solve(L, tmp, left_side=True, transpose_a=False, lower=True)
  return L, _mm(L, ew.mul(inner, phi))


cholesky_p = Primitive("cholesky")
cholesky_p.def_abstract_eval(_cholesky_abstract_eval)
lowering.register_lowering(cholesky_p, _cholesky_lowering)
ad.primitive_jvps[cholesky_p] = _cholesky_jvp
_defbatching(cholesky_p, 2)


def _symmetrize(x):
  nd = len(core.get_aval(x).shape)
  xt = shape.transpose(x, (*range(nd - 2), nd - 1, nd - 2))
  if dtypes.is_complex(core.get_aval(x).dtype):
    xt = ew.conj(xt)
  half = np.asarray(0.5, _real_of.get(core.get_aval(x).dtype, core.get_aval(x).dtype))
  return ew.mul(ew.add(x, xt), ew.convert_element_type(half, core.get_aval(x).dtype))


def cholesky(x: Any, *, symmetrize_input: bool = True) -> Any:
  """The lower Cholesky factor `L` of Hermitian positive-definite `x`: `x = L @ L^H`.

  Args:
    x: `T[..., n, n]`, T in float32, float64, complex64, complex128.
    symmetrize_input: use `(x + x^H) / 2` (else only the lower triangle of `x` is read).

  Returns:
    `T[..., n, n]`, lower triangular; NaN for matrices that are not positive definite.

  Raises:
    TypeError: for other dtypes. ValueError: for non-square or rank < 2 input.
  """
  if symmetrize_input:
    _check_matrix("cholesky", core.get_aval(x), square=True)
    x = _symmetrize(x)
  return cholesky_p.bind(x)


# ---------------------------------------------------------------------------
# lu: partial-pivoting LU (getrf): `lu` holds unit-lower L below the diagonal and U on and
# above it; `pivots[i]` is the row swapped with row i (0-based).


def _lu_abstract_eval(x: ShapedArray):
  _check_matrix("lu", x)
  m, n = x.shape[-2:]
  return [x.strip_weak_type(), ShapedArray((*_batch(x), min(m, n)), dtypes.int32)]


def _lu_lowering(ctx, x):
  aval, piv_aval = ctx.avals_out
  info_aval = ShapedArray(_batch(aval), dtypes.int32)
  if min(aval.shape[-2:]) == 0:
    return [x, ctx.constant(0, piv_aval)]
  f, piv, info = _lapack_call(ctx, "getrf", [x], [aval], [aval, piv_aval, info_aval], {},
                              {0: 0})
  piv = ctx.elementwise("stablehlo.subtract", piv, ctx.constant(1, piv_aval), aval=piv_aval)
  # NB: info > 0 flags an exactly singular U, which is still a valid factorization.
  return [_nan_if_failed(ctx, info, info_aval, f, aval, "GE"), piv]


def _permutation_matrix(perm, dtype):
  """The one-hot matrix `P[..., i, j] = (perm[..., i] == j)` (so `P @ a == a[perm]`)."""
  shp = _shape_of(perm)
  m = shp[-1]
  full = (*shp, m)
  rows = shape.broadcast_in_dim(perm, full, tuple(range(len(shp))))
  cols = shape.broadcasted_iota(dtypes.int32, full, len(shp))
  return ew.convert_element_type(ew.eq(rows, cols), dtype)


def _lu_jvp(primals, tangents):
  """JAX's `_lu_jvp_rule` (De Hoog, Anderssen, Lukas, "Differentiation of matrix functionals
  using triangular factorization"): with `X = L^-1 P dA U^-1`,
  `dLU = L tril(X, -1) + triu(X) U`. The pivots have zero (float0) tangents."""
  a, = primals
  a_dot, = tangents
  lu_, pivots = lu_p.bind(a)
  shp = _shape_of(a)
  dtype = _dtype_of(a)
  nd = len(shp)
  m, n = shp[-2:]
  k = min(m, n)
  batch = shp[:-2]
  zero = np.zeros((), dtype)[()]
  no_pad = [(0, 0, 0)] * (nd - 2)
  l = shape.slice(lu_, (0,) * nd, (*batch, m, k))
  l = shape.pad(_tril(l, -1), zero, [*no_pad, (0, 0, 0), (0, m - k, 0)])
  l = ew.add(l, _eye_like((*batch, m, m), dtype))
  u = shape.slice(lu_, (0,) * nd, (*batch, k, n))
  u = shape.pad(_triu(u), zero, [*no_pad, (0, n - k, 0), (0, 0, 0)])
  u_eye = np.pad(np.eye(n - k), ((k, 0), (k, 0)))
  if n > k:
    u = ew.add(u, _matrix_const(u_eye, (*batch, n, n), dtype))
  perm = lu_pivots_to_permutation(pivots, m)
  pa_dot = _mm(_permutation_matrix(perm, dtype), a_dot)
  la = triangular_solve(l, pa_dot, left_side=True, transpose_a=False, lower=True,
                        unit_diagonal=True)
  lau = triangular_solve(u, la, left_side=False, transpose_a=False, lower=False)
  lu_dot = ew.add(_mm(l, _tril(lau, -1)), _mm(_triu(lau), u))
  return [lu_, pivots], [lu_dot, ad.Zero(ad.tangent_aval(core.get_aval(pivots)))]


lu_p = Primitive("lu")
lu_p.multiple_results = True
lu_p.def_abstract_eval(_lu_abstract_eval)
lowering.register_lowering(lu_p, _lu_lowering)
ad.primitive_jvps[lu_p] = _lu_jvp
_defbatching(lu_p, 2)


def lu_pivots_to_permutation(pivots: Any, permutation_size: int) -> Any:
  """The permutation `perm` (`int32[..., permutation_size]`) made by applying the row swaps
  `i <-> pivots[..., i]` in order to the identity: `a[perm] == l @ u`.

  NB: unrolled (one one-hot step per pivot) until loops are staged.
  """
  paval = core.get_aval(pivots)
  batch, k = paval.shape[:-1], paval.shape[-1]
  m = permutation_size
  full = (*batch, m)
  nb = len(batch)
  iota = shape.broadcasted_iota(dtypes.int32, full, nb)
  perm = iota
  for i in range(k):
    j = shape.broadcast_in_dim(shape.squeeze(shape.slice_in_dim(pivots, i, i + 1, axis=nb),
                                             (nb,)), full, tuple(range(nb)))
    at_j = ew.eq(iota, j)
    pj = reduction.reduce_sum(ew.select(at_j, perm, shape.full(full, 0, dtypes.int32)), (nb,))
    pi = shape.slice_in_dim(perm, i, i + 1, axis=nb)
    pj = shape.broadcast_in_dim(pj, full, tuple(range(nb)))
    pi = shape.broadcast_in_dim(shape.squeeze(pi, (nb,)), full, tuple(range(nb)))
    perm = ew.select(ew.eq(iota, np.int32(i)), pj, ew.select(at_j, pi, perm))
  return perm


def lu(x: Any) -> tuple[Any, Any, Any]:
  """LU decomposition with partial pivoting: `x[..., perm, :] = L @ U`.

  Args:
    x: `T[..., m, n]`, T in float32, float64, complex64, complex128.

  Returns:
    `(lu T[..., m, n], pivots i32[..., min(m, n)], perm i32[..., m])`: `lu` packs the
    unit-lower `L[..., m, k]` (below the diagonal) and `U[..., k, n]`.

  Raises:
    TypeError: for other dtypes. ValueError: for rank < 2 input.
  """
  f, piv = lu_p.bind(x)
  return f, piv, lu_pivots_to_permutation(piv, core.get_aval(x).shape[-2])


# ---------------------------------------------------------------------------
# geqrf (Householder QR: R above the diagonal, reflectors below, and their scales `taus`)
# and householder_product (orgqr/ungqr: the product Q of those reflectors).


def _geqrf_abstract_eval(x: ShapedArray):
  _check_matrix("geqrf", x)
  m, n = x.shape[-2:]
  return [x.strip_weak_type(), ShapedArray((*_batch(x), min(m, n)), x.dtype)]


def _geqrf_lowering(ctx, x):
  aval, tau_aval = ctx.avals_out
  if min(aval.shape[-2:]) == 0:
    return [x, ctx.constant(0, tau_aval)]
  return _lapack_call(ctx, "geqrf", [x], [aval], [aval, tau_aval], {}, {0: 0})


geqrf_p = Primitive("geqrf")
geqrf_p.multiple_results = True
geqrf_p.def_abstract_eval(_geqrf_abstract_eval)
lowering.register_lowering(geqrf_p, _geqrf_lowering)
_defbatching(geqrf_p, 2)


def geqrf(x: Any) -> tuple[Any, Any]:
  """LAPACK's geqrf: `(a, taus)` with R in the upper triangle of `a[..., m, n]` and the
  Householder reflectors below it, scaled by `taus[..., min(m, n)]`."""
  return tuple(geqrf_p.bind(x))


def _householder_product_abstract_eval(a: ShapedArray, taus: ShapedArray):
  _check_matrix("householder_product", a)
  m, n = a.shape[-2:]
  if m < n:
    raise ValueError(f"householder_product requires m >= n, got {a.str_short()}.")
  if taus.dtype != a.dtype or taus.shape != (*_batch(a), taus.shape[-1]) or (
      taus.shape[-1] > n):
    raise ValueError(f"householder_product: taus must be {a.dtype.name}[..., k] with "
                     f"k <= {n} and a's batch dimensions, got {taus.str_short()}.")
  return a.strip_weak_type()


def _householder_product_lowering(ctx, a, taus):
  aval, = ctx.avals_out
  if min(aval.shape[-2:]) == 0:
    return [a]
  fn = "ungqr" if dtypes.is_complex(aval.dtype) else "orgqr"
  return _lapack_call(ctx, fn, [a, taus], list(ctx.avals_in), [aval], {}, {0: 0})


householder_product_p = Primitive("householder_product")
householder_product_p.def_abstract_eval(_householder_product_abstract_eval)
lowering.register_lowering(householder_product_p, _householder_product_lowering)
_defbatching(householder_product_p, 2, 1)


def householder_product(a: Any, taus: Any) -> Any:
  """The product Q (`T[..., m, n]`, orthonormal columns) of the Householder reflectors
  stored below the diagonal of `a` with scales `taus` (LAPACK's orgqr/ungqr)."""
  return householder_product_p.bind(a, taus)


# qr(x): params full_matrices; outputs q `T[..., m, k]` and r `T[..., k, n]`, k = m if
# full_matrices else min(m, n). Lowered as JAX lowers it: geqrf, then householder_product.


def _qr_abstract_eval(x: ShapedArray, *, full_matrices):
  _check_matrix("qr", x)
  m, n = x.shape[-2:]
  k = m if full_matrices else min(m, n)
  b = _batch(x)
  return [ShapedArray((*b, m, k), x.dtype), ShapedArray((*b, k, n), x.dtype)]


def _qr_composition(x, *, full_matrices):
  """q, r from geqrf and householder_product (JAX's `_qr_lowering`)."""
  aval = core.get_aval(x)
  m, n = aval.shape[-2:]
  nb = aval.ndim - 2
  r, taus = geqrf(x)
  if m < n:
    q = householder_product(shape.slice(r, (0,) * aval.ndim, (*_batch(aval), m, m)), taus)
  elif full_matrices:
    q = householder_product(shape.pad(r, np.zeros((), aval.dtype)[()],
                                      [(0, 0, 0)] * nb + [(0, 0, 0), (0, m - n, 0)]), taus)
  else:
    q = householder_product(r, taus)
    r = shape.slice(r, (0,) * aval.ndim, (*_batch(aval), n, n))
  return q, _triu(r)


def _qr_lowering(ctx, x, *, full_matrices):
  return _inline(ctx, lambda v: _qr_composition(v, full_matrices=full_matrices),
                 ctx.avals_in, [x])


def _thin_qr_jvp(q, r, dx):
  """JAX's `_thin_qr_jvp` for `x[..., m, n] = q r` with m >= n (J. Townsend, "Differentiating
  the QR decomposition"): with `C = q^H dx r^-1` and `dO` the skew-Hermitian part built from
  its strict lower triangle, `dq = q (dO - C) + dx r^-1` and `dr = (C - dO) r`."""
  dx_rinv = triangular_solve(r, dx)  # dx r^-1 (right side, upper)
  qt_dx_rinv = _mm(_H(q), dx_rinv)
  lower = _tril(qt_dx_rinv, -1)
  do = ew.sub(lower, _H(lower))  # skew-Hermitian
  if dtypes.is_complex(_dtype_of(q)):  # the imaginary part of the diagonal, for complex inputs
    shp = _shape_of(qt_dx_rinv)
    imag_part = ew.sub(qt_dx_rinv, _astype(ew.real(qt_dx_rinv), _dtype_of(q)))
    do = ew.add(do, ew.mul(_eye_like(shp, _dtype_of(q)), imag_part))
  dq = ew.add(_mm(q, ew.sub(do, qt_dx_rinv)), dx_rinv)
  dr = _mm(ew.sub(qt_dx_rinv, do), r)
  return dq, dr


def _solve_adjoint(a, b):
  """Solves `a^H x = b` for square `a` by LU with partial pivoting (primal values only)."""
  lu_, pivots = lu_p.bind(a)
  y = triangular_solve(lu_, b, left_side=True, lower=False, transpose_a=True,
                       conjugate_a=True)
  y = triangular_solve(lu_, y, left_side=True, lower=True, transpose_a=True, conjugate_a=True,
                       unit_diagonal=True)
  perm = lu_pivots_to_permutation(pivots, _shape_of(a)[-1])
  # a[perm] = L U, so a^H = U^H L^H P and x = P^T y.
  return _mm(_T(_permutation_matrix(perm, _dtype_of(a))), y)


def _qr_jvp(primals, tangents, *, full_matrices):
  """JAX's `qr_jvp_rule`: the thin rule on the leading square block for wide matrices (with
  `dR2 = dQ^H X2 + Q^H dX2`), and for full_matrices with m > n the completion of dQ from
  Roberts and Roberts, arXiv:2409.13374 (eqs. 32-33)."""
  x, = primals
  dx, = tangents
  q, r = qr_p.bind(x, full_matrices=full_matrices)
  shp = _shape_of(x)
  nd = len(shp)
  batch = shp[:-2]
  m, n = shp[-2:]
  dtype = _dtype_of(x)
  zero_idx = (0,) * nd

  def cols(v, lo, hi):
    vs = _shape_of(v)
    return shape.slice(v, (*zero_idx[:-1], lo), (*vs[:-1], hi))

  def rows(v, lo, hi):
    vs = _shape_of(v)
    return shape.slice(v, (*zero_idx[:-2], lo, 0), (*vs[:-2], hi, vs[-1]))

  if m < n:
    dq, dr1 = _thin_qr_jvp(q, cols(r, 0, m), cols(dx, 0, m))
    dr2 = ew.add(_mm(_H(dq), cols(x, m, n)), _mm(_H(q), cols(dx, m, n)))
    return [q, r], [dq, shape.concatenate([dr1, dr2], nd - 1)]
  q_mn = cols(q, 0, n) if full_matrices else q
  r_nn = rows(r, 0, n) if full_matrices else r
  dq_mn, dr_nn = _thin_qr_jvp(q_mn, r_nn, dx)
  if not full_matrices or m == n:
    return [q, r], [dq_mn, dr_nn]
  q_nn, q_pn, q_mp = rows(q_mn, 0, n), rows(q_mn, n, m), cols(q, n, m)
  dq_nn, dq_pn = rows(dq_mn, 0, n), rows(dq_mn, n, m)
  # Eq. 33: Z_pn = Q_pn (Q_nn - I)^-1, from (Q_nn - I)^H Z_pn^H = Q_pn^H.
  z_pn_h = _solve_adjoint(ew.sub(q_nn, _eye_like((*batch, n, n), dtype)), _H(q_pn))
  z_pn = _H(z_pn_h)
  # Eq. 32: dQ_mp = dQ_mn Z_pn^H - (Q_mn + Q_mp Z_pn) (dQ_pn - Z_pn dQ_nn)^H.
  dq_mp = ew.sub(_mm(dq_mn, z_pn_h),
                 _mm(ew.add(q_mn, _mm(q_mp, z_pn)), _H(ew.sub(dq_pn, _mm(z_pn, dq_nn)))))
  dq = shape.concatenate([dq_mn, dq_mp], nd - 1)
  zero = np.zeros((), dtype)[()]
  dr = shape.pad(dr_nn, zero, [(0, 0, 0)] * (nd - 2) + [(0, m - n, 0), (0, 0, 0)])
  return [q, r], [dq, dr]


qr_p = Primitive("qr")
qr_p.multiple_results = True
qr_p.def_abstract_eval(_qr_abstract_eval)
lowering.register_lowering(qr_p, _qr_lowering)
ad.primitive_jvps[qr_p] = _qr_jvp
_defbatching(qr_p, 2)


def qr(x: Any, *, full_matrices: bool = True) -> tuple[Any, Any]:
  """QR decomposition `x = Q @ R` (the `qr` primitive; lowered via geqrf and
  householder_product, as in JAX).

  Args:
    x: `T[..., m, n]`, T in float32, float64, complex64, complex128.
    full_matrices: Q `[..., m, m]` and R `[..., m, n]`; else Q `[..., m, k]` and R
      `[..., k, n]` with `k = min(m, n)`.

  Returns:
    `(q, r)`, q with orthonormal columns, r upper triangular.

  Raises:
    TypeError: for other dtypes. ValueError: for rank < 2 input.
  """
  return tuple(qr_p.bind(x, full_matrices=bool(full_matrices)))


# ---------------------------------------------------------------------------
# eigh: eigenvalues (ascending, real) and eigenvectors of Hermitian matrices (syevd/heevd).


def _eigh_abstract_eval(x: ShapedArray, *, lower, sort_eigenvalues, subset_by_index):
  _check_matrix("eigh", x, square=True)
  if subset_by_index is not None and tuple(subset_by_index) != (0, x.shape[-1]):
    raise NotImplementedError("eigh: subset_by_index is not implemented.")
  return [x.strip_weak_type(),
          ShapedArray(x.shape[:-1], _real_of.get(x.dtype, x.dtype))]


def _eigh_lowering(ctx, x, *, lower, sort_eigenvalues, subset_by_index):
  v_aval, w_aval = ctx.avals_out
  info_aval = ShapedArray(_batch(v_aval), dtypes.int32)
  if v_aval.shape[-1] == 0:
    return [x, ctx.constant(0, w_aval)]
  v, w, info = _lapack_call(ctx, "syevd" if not dtypes.is_complex(v_aval.dtype) else "heevd",
                            [x], [v_aval], [v_aval, w_aval, info_aval],
                            {"mode": ord("V"), "uplo": ord("L" if lower else "U")}, {0: 0})
  return [_nan_if_failed(ctx, info, info_aval, v, v_aval),
          _nan_if_failed(ctx, info, info_aval, w, w_aval)]


def _eigh_jvp(primals, tangents, *, lower, sort_eigenvalues, subset_by_index):
  """JAX's `_eigh_jvp_rule` (nondegenerate perturbation theory; Giles, "An extended
  collection of matrix derivative results", 2008): with `S = V^H dA V`,
  `dw = real(diag(S))` and `dV = V (F * S)`, `F[i, j] = 1 / (w[j] - w[i])` off the diagonal
  and 0 on it. Repeated eigenvalues give infinite or NaN eigenvector tangents, as in JAX."""
  a, = primals
  a_dot, = tangents
  shp = _shape_of(a)
  n = shp[-1]
  if not (subset_by_index is None or tuple(subset_by_index) == (0, n)):
    raise NotImplementedError("Derivatives not defined for partial eigen decomposition.")
  v, w_real = eigh_p.bind(a, lower=lower, sort_eigenvalues=sort_eigenvalues,
                          subset_by_index=subset_by_index)
  dtype = _dtype_of(a)
  w = _astype(w_real, dtype)
  eye = _eye_like(shp, dtype)
  # NB: 1 / (eye + w[j] - w[i]) - eye: finite on the diagonal without a select.
  diffs = ew.add(eye, ew.sub(_rows(w, n), _cols(w, n)))
  fmat = ew.sub(ew.div(shape.full(shp, 1, dtype), diffs), eye)
  vdag_adot_v = _mm(_mm(_H(v), a_dot), v)
  dv = _mm(v, ew.mul(fmat, vdag_adot_v))
  dw = _extract_diagonal(_real_part(vdag_adot_v))
  return [v, w_real], [dv, dw]


eigh_p = Primitive("eigh")
eigh_p.multiple_results = True
eigh_p.def_abstract_eval(_eigh_abstract_eval)
lowering.register_lowering(eigh_p, _eigh_lowering)
ad.primitive_jvps[eigh_p] = _eigh_jvp
_defbatching(eigh_p, 2)


def eigh(x: Any, *, lower: bool = True, symmetrize_input: bool = True,
         sort_eigenvalues: bool = True, subset_by_index: tuple[int, int] | None = None):
  """Eigendecomposition of Hermitian `x`: `x @ v = v * w`.

  Args:
    x: `T[..., n, n]`, T in float32, float64, complex64, complex128.
    lower: read the lower (else the upper) triangle when not symmetrizing.
    symmetrize_input: use `(x + x^H) / 2`.
    sort_eigenvalues: accepted; LAPACK returns ascending eigenvalues.

  Returns:
    `(v T[..., n, n], w R[..., n])`: eigenvectors in the columns of `v` and the eigenvalues
    `w` (real dtype R), ascending; NaN where LAPACK fails to converge.
  """
  if symmetrize_input:
    _check_matrix("eigh", core.get_aval(x), square=True)
    x = _symmetrize(x)
  v, w = eigh_p.bind(x, lower=bool(lower), sort_eigenvalues=bool(sort_eigenvalues),
                     subset_by_index=None if subset_by_index is None else
                     tuple(subset_by_index))
  return v, w


# ---------------------------------------------------------------------------
# svd: singular values (descending) and vectors (gesdd, divide and conquer).


def _svd_abstract_eval(x: ShapedArray, *, full_matrices, compute_uv, subset_by_index):
  _check_matrix("svd", x)
  if subset_by_index is not None and tuple(subset_by_index) != (0, min(x.shape[-2:])):
    raise NotImplementedError("svd: subset_by_index is not implemented.")
  m, n = x.shape[-2:]
  k = min(m, n)
  b = _batch(x)
  s = ShapedArray((*b, k), _real_of.get(x.dtype, x.dtype))
  if not compute_uv:
    return [s]
  u = ShapedArray((*b, m, m if full_matrices else k), x.dtype)
  vt = ShapedArray((*b, n if full_matrices else k, n), x.dtype)
  return [s, u, vt]


def _svd_lowering(ctx, x, *, full_matrices, compute_uv, subset_by_index):
  aval, = ctx.avals_in
  m, n = aval.shape[-2:]
  b = _batch(aval)
  k = min(m, n)
  if k == 0:
    outs = []
    for o in ctx.avals_out:   # empty s; identity-like u/vt (zeros when empty)
      if o.ndim == aval.ndim:
        eye = _triangle_mask(ctx, o, True)
        eye = ctx.elementwise("stablehlo.and", eye, _triangle_mask(ctx, o, False),
                              aval=o.update(dtype=dtypes.bool_))
        outs.append(_select(ctx, eye, ctx.constant(1, o), ctx.constant(0, o), o))
      else:
        outs.append(ctx.constant(0, o))
    return outs
  s_aval = ShapedArray((*b, k), _real_of.get(aval.dtype, aval.dtype))
  u_aval = ShapedArray((*b, m, m if (full_matrices or not compute_uv) else k), aval.dtype)
  vt_aval = ShapedArray((*b, n if (full_matrices or not compute_uv) else k, n), aval.dtype)
  info_aval = ShapedArray(b, dtypes.int32)
  mode = ord("N") if not compute_uv else ord("A") if full_matrices else ord("S")
  _, s, u, vt, info = _lapack_call(ctx, "gesdd", [x], [aval],
                                   [aval, s_aval, u_aval, vt_aval, info_aval],
                                   {"mode": mode}, {0: 0})
  outs = [_nan_if_failed(ctx, info, info_aval, s, s_aval)]
  if compute_uv:
    outs += [_nan_if_failed(ctx, info, info_aval, u, u_aval),
             _nan_if_failed(ctx, info, info_aval, vt, vt_aval)]
  return outs


def _svd_jvp(primals, tangents, *, full_matrices, compute_uv, subset_by_index):
  """JAX's `_svd_jvp_rule` (Townsend, "Differentiating the singular value decomposition",
  2016): with `dS = U^H dA V`, `ds = real(diag(dS))`; the singular vectors' tangents use
  `F[i, j] = 1 / (s[j]^2 - s[i]^2)` (0 on the diagonal) plus, for non-square matrices, the
  components outside the span of U (or V). Repeated singular values give infinite tangents.

  Raises:
    NotImplementedError: for `compute_uv` with `full_matrices` on non-square matrices (as
      JAX; pass `full_matrices=False`).
  """
  A, = primals
  dA, = tangents
  shp = _shape_of(A)
  m, n = shp[-2:]
  if compute_uv and full_matrices and m != n:
    raise NotImplementedError(
        "Singular value decomposition JVP not implemented for full matrices: the tangents "
        "of the extra singular vectors are not unique. Differentiate svd(x, "
        "full_matrices=False) instead.")
  s, U, Vt = svd_p.bind(A, full_matrices=False, compute_uv=True,
                        subset_by_index=subset_by_index)
  dtype = _dtype_of(A)
  k = min(m, n)
  Ut, V = _H(U), _H(Vt)
  dS = _mm(_mm(Ut, dA), V)
  ds = _extract_diagonal(_real_part(dS))
  if not compute_uv:
    return [s], [ds]
  s_row, s_col = _rows(s, k), _cols(s, k)  # s[j] and s[i] at [i, j]
  rdtype = _dtype_of(s)
  eye_r = _eye_like((*shp[:-2], k, k), rdtype)
  s_diffs = ew.mul(ew.add(s_row, s_col), ew.sub(s_row, s_col))
  F = _astype(ew.sub(ew.div(shape.full(_shape_of(s_diffs), 1, rdtype), ew.add(s_diffs, eye_r)),
                     eye_r), dtype)
  dSS = ew.mul(_astype(s_row, dtype), dS)   # dS diag(s)
  SdS = ew.mul(_astype(s_col, dtype), dS)   # diag(s) dS
  s_zeros = ew.convert_element_type(ew.eq(s, np.zeros((), rdtype)[()]), rdtype)
  s_inv = ew.sub(ew.div(shape.full(_shape_of(s), 1, rdtype), ew.add(s, s_zeros)), s_zeros)
  s_inv_mat = ew.mul(_cols(s_inv, k), eye_r)
  half = np.asarray(0.5, dtype)[()]
  dUdV_diag = ew.mul(ew.mul(ew.sub(dS, _H(dS)), half), _astype(s_inv_mat, dtype))
  dU = _mm(U, ew.add(ew.mul(F, ew.add(dSS, _H(dSS))), dUdV_diag))
  dV = _mm(V, ew.mul(F, ew.add(SdS, _H(SdS))))
  if m > n:
    dAV = _mm(dA, V)
    inv_s = _astype(ew.div(shape.full((*shp[:-2], m, k), 1, rdtype), _rows(s, m)), dtype)
    dU = ew.add(dU, ew.mul(ew.sub(dAV, _mm(U, _mm(Ut, dAV))), inv_s))
  if n > m:
    dAHU = _mm(_H(dA), U)
    inv_s = _astype(ew.div(shape.full((*shp[:-2], n, k), 1, rdtype), _rows(s, n)), dtype)
    dV = ew.add(dV, ew.mul(ew.sub(dAHU, _mm(V, _mm(Vt, dAHU))), inv_s))
  return [s, U, Vt], [ds, dU, _H(dV)]


svd_p = Primitive("svd")
svd_p.multiple_results = True
svd_p.def_abstract_eval(_svd_abstract_eval)
lowering.register_lowering(svd_p, _svd_lowering)
ad.primitive_jvps[svd_p] = _svd_jvp
_defbatching(svd_p, 2)


def svd(x: Any, *, full_matrices: bool = True, compute_uv: bool = True,
        subset_by_index: tuple[int, int] | None = None):
  """Singular value decomposition `x = u @ diag(s) @ vt`.

  Args:
    x: `T[..., m, n]`, T in float32, float64, complex64, complex128.
    full_matrices: u `[..., m, m]`, vt `[..., n, n]`; else `[..., m, k]`, `[..., k, n]`.
    compute_uv: also return u and vt.

  Returns:
    `(u, s, vt)` as JAX orders them (the primitive's outputs are `[s, u, vt]`), or `s`
    alone (`R[..., k]`, descending, real dtype R); NaN where LAPACK fails.
  """
  outs = svd_p.bind(x, full_matrices=bool(full_matrices), compute_uv=bool(compute_uv),
                    subset_by_index=None if subset_by_index is None else
                    tuple(subset_by_index))
  if not compute_uv:
    return outs[0]
  s, u, vt = outs
  return u, s, vt


# ---------------------------------------------------------------------------
# triangular_solve: op(a) x = b (left_side) or x op(a) = b, with a triangular.


def _triangular_solve_abstract_eval(a: ShapedArray, b: ShapedArray, *, left_side, lower,
                                    transpose_a, conjugate_a, unit_diagonal):
  _check_matrix("triangular_solve", a, square=True)
  _check_matrix("triangular_solve", b)
  if a.dtype != b.dtype:
    raise TypeError(f"triangular_solve requires a and b of one dtype, got {a.dtype.name} and "
                    f"{b.dtype.name}.")
  if a.shape[:-2] != b.shape[:-2]:
    raise TypeError(f"triangular_solve requires equal batch dimensions, got "
                    f"{a.str_short()} and {b.str_short()}.")
  common = b.shape[-2] if left_side else b.shape[-1]
  if a.shape[-1] != common:
    raise TypeError(f"triangular_solve: a {a.str_short()} does not fit b {b.str_short()} "
                    f"({'rows' if left_side else 'columns'} of b must equal {a.shape[-1]}).")
  return b.strip_weak_type()


def _triangular_solve_lowering(ctx, a, b, *, left_side, lower, transpose_a, conjugate_a,
                               unit_diagonal):
  a_aval, b_aval = ctx.avals_in
  if conjugate_a and not transpose_a and dtypes.is_complex(a_aval.dtype):
    r_aval = a_aval.update(dtype=_real_of[a_aval.dtype])
    re = ctx.op("stablehlo.real", [a], [r_aval], operand_avals=[a_aval])[0]
    im = ctx.op("stablehlo.imag", [a], [r_aval], operand_avals=[a_aval])[0]
    im = ctx.elementwise("stablehlo.negate", im, aval=r_aval)
    a = ctx.op("stablehlo.complex", [re, im], [a_aval], operand_avals=[r_aval, r_aval])[0]
  if not transpose_a:
    t = "NO_TRANSPOSE"
  elif conjugate_a and dtypes.is_complex(a_aval.dtype):
    t = "ADJOINT"
  else:
    t = "TRANSPOSE"
  if b_aval.size == 0 or a_aval.size == 0:
    return [b]
  b_ = lambda v: "true" if v else "false"  # noqa: E731
  return ctx.op("stablehlo.triangular_solve", [a, b],
                attrs=f"left_side = {b_(left_side)}, lower = {b_(lower)}, unit_diagonal = "
                      f"{b_(unit_diagonal)}, transpose_a = #stablehlo<transpose {t}>")


def _triangular_solve_jvp_a(g_a, ans, a, b, *, left_side, lower, transpose_a, conjugate_a,
                            unit_diagonal):
  """JAX's `_triangular_solve_jvp_rule_a`: `dX = -op(A)^-1 op(dA) X` (left side) or
  `-X op(dA) op(A)^-1`, with dA restricted to the triangle the solve reads, in whichever
  order of product and solve is cheaper."""
  m, n = _shape_of(b)[-2:]
  k = 1 if unit_diagonal else 0
  g_a = _tril(g_a, -k) if lower else _triu(g_a, k)
  g_a = ew.neg(g_a)
  g_a = _T(g_a) if transpose_a else g_a
  g_a = ew.conj(g_a) if conjugate_a and dtypes.is_complex(_dtype_of(g_a)) else g_a

  def a_inverse(rhs):
    return triangular_solve(a, rhs, left_side=left_side, lower=lower, transpose_a=transpose_a,
                            conjugate_a=conjugate_a, unit_diagonal=unit_diagonal)

  if left_side:
    return a_inverse(_mm(g_a, ans)) if m > n else _mm(a_inverse(g_a), ans)
  return a_inverse(_mm(ans, g_a)) if m < n else _mm(ans, a_inverse(g_a))


def _triangular_solve_jvp_b(g_b, ans, a, b, **params):
  return triangular_solve_p.bind(a, g_b, **params)


def _triangular_solve_transpose(ct, a, b, *, left_side, lower, transpose_a, conjugate_a,
                                unit_diagonal):
  """Linear in `b` (like division, swapped): the transpose solves with `op(a)^T`."""
  if ad.is_undefined_primal(a):
    raise ValueError("triangular_solve is not linear in `a`; it can be transposed in `b` "
                     "only.")
  if type(ct) is ad.Zero:
    return [None, ad.Zero(b.aval)]
  return [None, triangular_solve_p.bind(a, ct, left_side=left_side, lower=lower,
                                        transpose_a=not transpose_a, conjugate_a=conjugate_a,
                                        unit_diagonal=unit_diagonal)]


triangular_solve_p = Primitive("triangular_solve")
triangular_solve_p.def_abstract_eval(_triangular_solve_abstract_eval)
lowering.register_lowering(triangular_solve_p, _triangular_solve_lowering)
ad.defjvp2(triangular_solve_p, _triangular_solve_jvp_a, _triangular_solve_jvp_b)
ad.primitive_transposes[triangular_solve_p] = _triangular_solve_transpose


def _triangular_solve_batch_rule(batched_args, batch_dims, *, left_side, lower, transpose_a,
                                 conjugate_a, unit_diagonal):
  """JAX's `_triangular_solve_batching_rule`: with only `b` batched, its batch axis is
  folded into b's columns (left side) or rows (right side): one solve with many right-hand
  sides; otherwise both operands are aligned at a leading batch dim."""
  a, b = batched_args
  bda, bdb = batch_dims
  params = dict(left_side=left_side, lower=lower, transpose_a=transpose_a,
                conjugate_a=conjugate_a, unit_diagonal=unit_diagonal)
  if bda is None:
    nd = len(_shape_of(b))
    if left_side:   # b[..., n, k, B] -> b[..., n, k*B]
      b = batching.moveaxis(b, bdb, nd - 1)
      shp = _shape_of(b)
      flat = shape.reshape(b, (*shp[:-2], shp[-2] * shp[-1]))
      out_dim = nd - 1
    else:           # b[..., k, B, n] -> b[..., k*B, n]
      b = batching.moveaxis(b, bdb, nd - 2)
      shp = _shape_of(b)
      flat = shape.reshape(b, (*shp[:-3], shp[-3] * shp[-2], shp[-1]))
      out_dim = nd - 2
    out = triangular_solve_p.bind(a, flat, **params)
    return shape.reshape(out, shp), out_dim
  (a, b), bdim = _leading_bdims([a, b], [bda, bdb], (2, 2))
  return triangular_solve_p.bind(a, b, **params), bdim


batching.primitive_batchers[triangular_solve_p] = _triangular_solve_batch_rule


def triangular_solve(a: Any, b: Any, left_side: bool = False, lower: bool = False,
                     transpose_a: bool = False, conjugate_a: bool = False,
                     unit_diagonal: bool = False) -> Any:
  """Solves `op(a) @ x = b` (`left_side`) or `x @ op(a) = b` for triangular `a`
  (JAX's `lax.linalg.triangular_solve`; note JAX's default `left_side=False`).

  Args:
    a: `T[..., n, n]`; only the `lower` (else upper) triangle is read.
    b: `T[..., n, k]` (left_side) or `T[..., k, n]`.
    transpose_a, conjugate_a: `op(a)` is `a`, `a^T`, `conj(a)` or `a^H`.
    unit_diagonal: assume ones on the diagonal of `a` (it is not read).

  Returns:
    `x`, shaped like `b`.

  Raises:
    TypeError: for other dtypes, differing dtypes, or shapes that do not fit.
  """
  return triangular_solve_p.bind(a, b, left_side=bool(left_side), lower=bool(lower),
                                 transpose_a=bool(transpose_a),
                                 conjugate_a=bool(conjugate_a),
                                 unit_diagonal=bool(unit_diagonal))
