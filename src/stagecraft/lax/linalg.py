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

`qr`, `lu_pivots_to_permutation` and the permutation output of `lu` are compositions here
(JAX has `qr_p`, and a third `lu_p` output computed with a loop, which needs control flow).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from stagecraft import core, dtypes
from stagecraft.core import Primitive, ShapedArray
from stagecraft.interpreters import lowering
from stagecraft.interpreters.lowering import ir_type
from stagecraft.lax.elementwise import _compare

__all__ = ["cholesky_p", "lu_p", "geqrf_p", "householder_product_p", "eigh_p", "svd_p",
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
  ok = _compare(ctx, direction, info, ctx.constant(0, info_aval), info_aval)
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
  return _compare(ctx, "GE" if lower else "LE", rows, cols, idx)


def _batch(aval: ShapedArray) -> tuple[int, ...]:
  return aval.shape[:-2]


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


cholesky_p = Primitive("cholesky")
cholesky_p.def_abstract_eval(_cholesky_abstract_eval)
lowering.register_lowering(cholesky_p, _cholesky_lowering)


def _symmetrize(x):
  from stagecraft.lax import elementwise as ew, shape
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


lu_p = Primitive("lu")
lu_p.multiple_results = True
lu_p.def_abstract_eval(_lu_abstract_eval)
lowering.register_lowering(lu_p, _lu_lowering)


def lu_pivots_to_permutation(pivots: Any, permutation_size: int) -> Any:
  """The permutation `perm` (`int32[..., permutation_size]`) made by applying the row swaps
  `i <-> pivots[..., i]` in order to the identity: `a[perm] == l @ u`.

  NB: unrolled (one one-hot step per pivot) until loops are staged.
  """
  from stagecraft.lax import elementwise as ew, reduction, shape, slicing
  paval = core.get_aval(pivots)
  batch, k = paval.shape[:-1], paval.shape[-1]
  m = permutation_size
  full = (*batch, m)
  nb = len(batch)
  iota = shape.broadcasted_iota(dtypes.int32, full, nb)
  perm = iota
  for i in range(k):
    j = shape.broadcast_in_dim(shape.squeeze(slicing.slice_in_dim(pivots, i, i + 1, axis=nb),
                                             (nb,)), full, tuple(range(nb)))
    at_j = ew.eq(iota, j)
    pj = reduction.reduce_sum(ew.select(at_j, perm, shape.full(full, 0, dtypes.int32)), (nb,))
    pi = slicing.slice_in_dim(perm, i, i + 1, axis=nb)
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


def householder_product(a: Any, taus: Any) -> Any:
  """The product Q (`T[..., m, n]`, orthonormal columns) of the Householder reflectors
  stored below the diagonal of `a` with scales `taus` (LAPACK's orgqr/ungqr)."""
  return householder_product_p.bind(a, taus)


def qr(x: Any, *, full_matrices: bool = True) -> tuple[Any, Any]:
  """QR decomposition `x = Q @ R` (via geqrf and householder_product, as JAX lowers it).

  Args:
    x: `T[..., m, n]`.
    full_matrices: Q `[..., m, m]` and R `[..., m, n]`; else Q `[..., m, k]` and R
      `[..., k, n]` with `k = min(m, n)`.

  Returns:
    `(q, r)`, r upper triangular.
  """
  from stagecraft.lax import elementwise as ew, shape, slicing
  aval = core.get_aval(x)
  _check_matrix("qr", aval)
  m, n = aval.shape[-2:]
  nb = aval.ndim - 2
  r, taus = geqrf(x)
  if m < n:
    q = householder_product(slicing.slice(r, (0,) * aval.ndim, (*_batch(aval), m, m)), taus)
  elif full_matrices:
    q = householder_product(shape.pad(r, np.zeros((), aval.dtype)[()],
                                      [(0, 0, 0)] * nb + [(0, 0, 0), (0, m - n, 0)]), taus)
  else:
    q = householder_product(r, taus)
    r = slicing.slice(r, (0,) * aval.ndim, (*_batch(aval), n, n))
  raval = core.get_aval(r)
  rows = shape.broadcasted_iota(dtypes.int32, raval.shape, nb)
  cols = shape.broadcasted_iota(dtypes.int32, raval.shape, nb + 1)
  r = ew.select(ew.le(rows, cols), r, shape.full(raval.shape, 0, raval.dtype))
  return q, r


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


eigh_p = Primitive("eigh")
eigh_p.multiple_results = True
eigh_p.def_abstract_eval(_eigh_abstract_eval)
lowering.register_lowering(eigh_p, _eigh_lowering)


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


svd_p = Primitive("svd")
svd_p.multiple_results = True
svd_p.def_abstract_eval(_svd_abstract_eval)
lowering.register_lowering(svd_p, _svd_lowering)


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


triangular_solve_p = Primitive("triangular_solve")
triangular_solve_p.def_abstract_eval(_triangular_solve_abstract_eval)
lowering.register_lowering(triangular_solve_p, _triangular_solve_lowering)


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
