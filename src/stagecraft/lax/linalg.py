"""Linear-algebra primitives (JAX's `lax.linalg`): `cholesky`, `lu`, `geqrf`,
`householder_product`, `eigh`, `svd` and `triangular_solve`, each over the trailing two
dimensions with any leading batch dimensions.

On CPU the decompositions lower, as JAX's do, to `stablehlo.custom_call`s of the LAPACK
kernels that jaxlib registers with XLA (typed FFI, api_version 4: `lapack_spotrf_ffi`,
`lapack_sgetrf_ffi`, ...); their operands and results use column-major matrix layouts, set
with `operand_layouts`/`result_layouts`. A factorization that fails (LAPACK's `info != 0`)
gives NaNs, as in JAX. `triangular_solve` lowers to LAPACK trsm on CPU (as JAX), elsewhere
to `stablehlo.triangular_solve`, which XLA expands. Supported dtypes: float32, float64,
complex64, complex128.

On GPUs they lower, as JAX 0.10.2's do, to the cuSOLVER kernels that jaxlib's CUDA plugin
registers (`cusolver_potrf_ffi`, `cusolver_getrf_ffi`, `cusolver_geqrf_ffi`,
`cusolver_orgqr_ffi`, `cusolver_syevd_ffi`, `cusolver_gesvdj_ffi` / `cusolver_gesvd_ffi`;
hipSOLVER's on ROCm), one target per function for every dtype, with the same layouts; a
module is lowered for the platform of the device it will run on (`lowering.for_device`).

`qr` is a primitive, as in JAX, so that it is differentiated as a whole (JAX's `qr_jvp_rule`);
it lowers to geqrf and householder_product. `lu_p` has three results, as JAX's: the packed
factors, the pivots and the permutation, which its lowering computes from the pivots with
the unrolled composition behind `lu_pivots_to_permutation` (on GPUs too: no
`cu_lu_pivots_to_permutation` kernel).

Derivatives follow JAX: JVP rules for cholesky, eigh, lu, qr, svd and triangular_solve
(whose transpose in `b` is another triangular solve); geqrf and householder_product are not
differentiable, as in JAX (differentiate `qr` instead).

Also JAX's other `lax.linalg` functions: `eig` (geev; eigenvalue derivatives, eigenvector
ones with `enable_eigvec_derivs`), `schur` (gees), `hessenberg` (gehrd), `tridiagonal`
(sytrd/hetrd), `tridiagonal_solve` (gtsv; differentiable, transposable in `b`), `ormqr`
(ormqr/unmqr), `qr(pivoting=True)` (geqp3), the `lu_pivots_to_permutation` primitive,
`cholesky_update` and `symmetric_product` (compositions, differentiable), and `qdwh`
(a `while_loop` of QR/Cholesky steps). schur, hessenberg, tridiagonal, ormqr and geqp3 have
JVP rules that raise NotImplementedError, as JAX has none. On GPUs tridiagonal (sytrd),
ormqr and tridiagonal_solve (cuSPARSE gtsv2) have cuSOLVER kernels, and eig and geqp3 run on
jaxlib's hybrid kernels (`cuhybrid_eig_real`/`_comp`, `cuhybrid_geqp3`: host LAPACK or
MAGMA, after `jaxlib.gpu_solver.initialize_hybrid_kernels()`, as JAX). schur and hessenberg
are LAPACK-only, as in JAX: they raise NotImplementedError naming themselves when lowered
for a platform other than CPU.
"""
from __future__ import annotations

import enum
from functools import partial
from typing import Any

import numpy as np

from stagecraft import core, dtypes
from stagecraft.config import config as _config
from stagecraft.core import Primitive, ShapedArray
from stagecraft.interpreters import ad, batching, lowering
from stagecraft.interpreters import partial_eval as pe
from stagecraft.interpreters.lowering import ir_type
from stagecraft.lax import elementwise as ew
from stagecraft.lax import reduction, shape
from stagecraft.lax.control_flow.conditionals import cond
from stagecraft.lax.control_flow.while_op import while_loop
from stagecraft.lax.dot import Precision, dot_general
from stagecraft.lax.elementwise import emit_compare

__all__ = ["cholesky_p", "lu_p", "geqrf_p", "householder_product_p", "qr_p", "eigh_p", "svd_p",
           "triangular_solve_p", "cholesky", "lu", "lu_pivots_to_permutation", "geqrf",
           "householder_product", "qr", "eigh", "svd", "triangular_solve",
           "eig_p", "schur_p", "hessenberg_p", "tridiagonal_p", "tridiagonal_solve_p", "ormqr_p",
           "geqp3_p", "lu_pivots_to_permutation_p", "cholesky_update_p", "symmetric_product_p",
           "eig", "schur", "hessenberg", "tridiagonal", "tridiagonal_solve", "ormqr", "geqp3",
           "cholesky_update", "symmetric_product", "qdwh", "EigImplementation",
           "EighImplementation", "SvdAlgorithm"]

_LAPACK_PREFIX = {dtypes.float32: "s", dtypes.float64: "d", dtypes.complex64: "c",
                  dtypes.complex128: "z"}
_real_of = {dtypes.complex64: dtypes.float32, dtypes.complex128: dtypes.float64}


# ---------------------------------------------------------------------------
# Shared checks and emitters


def _check_matrix(name: str, x: ShapedArray, square: bool = False) -> None:
  if x.dtype not in _LAPACK_PREFIX and dtypes.is_inexact(x.dtype):
    # NB: JAX's exception for a float16/bfloat16 matrix on CPU (its LAPACK lowering's
    # "Unsupported dtype float16.")
    raise NotImplementedError(
        f"Unsupported dtype {x.dtype.name}. {name} runs LAPACK, which takes float32, float64, "
        f"complex64 and complex128: convert first, e.g. with astype(jnp.float32).")
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


def _ensure_hybrid_kernels() -> None:
  """Loads the host LAPACK (and MAGMA, where installed) function pointers of jaxlib's GPU
  hybrid kernels (`cuhybrid_eig_real`, `cuhybrid_geqp3`, ...), as JAX does before lowering
  to them; without it they crash the process. Idempotent."""
  if _hybrid_ready[0]:
    return
  from jaxlib import gpu_solver  # NB: a jaxlib module; only where a GPU module is lowered
  gpu_solver.initialize_hybrid_kernels()
  _hybrid_ready[0] = True


_hybrid_ready = [False]


def _magma_mode(use_magma: bool | None) -> str:
  """The hybrid kernels' `magma` attribute: 'on'/'off' when chosen, else JAX's
  `jax_use_magma` option ('auto' by default)."""
  if use_magma is not None:
    return "on" if use_magma else "off"
  return str(_config.jax_use_magma)


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


def _layout(aval: ShapedArray, nb: int, column_major: bool = True) -> str:
  """Column-major for matrices (rank nb + 2: rows, columns, then the batch dims from the
  last), row-major for everything else (vectors and per-matrix scalars) and for matrices
  when not `column_major`."""
  r = aval.ndim
  dims = ([r - 2, r - 1, *range(r - 3, -1, -1)] if r == nb + 2 and column_major
          else list(range(r - 1, -1, -1)))
  if not dims:
    return "dense<> : tensor<0xindex>"
  return f"dense<[{', '.join(map(str, dims))}]> : tensor<{r}xindex>"


def _attr(v) -> str:
  """An FFI attribute: bool -> `true`/`false`, np.int32 -> i32, int -> ui8 (LAPACK's
  character flags, cuSOLVER's algorithm codes), str -> a string (the hybrid kernels'
  `magma` mode)."""
  if isinstance(v, (bool, np.bool_)):
    return "true" if v else "false"
  if isinstance(v, str):
    return '"' + v + '"'
  if isinstance(v, np.int32):
    return f"{int(v)} : i32"
  return f"{int(v)} : ui8"


def _ffi_call(ctx, target: str, operands, operand_avals, result_avals, config: dict[str, Any],
              aliases: dict[int, int], nb: int | None = None, column_major: bool = True):
  """A typed-FFI (api_version 4) `stablehlo.custom_call` of `target`; `config` holds the
  attributes (see `_attr`), `aliases` maps result to operand indices, `nb` is the number of
  batch dims (default: those of the first operand, a matrix); matrices are column-major
  unless `column_major` is False."""
  cfg = ", ".join(f"{k} = {_attr(v)}" for k, v in config.items())
  alias = ", ".join(
      f"#stablehlo.output_operand_alias<output_tuple_indices = "
      f"[{r}], operand_index = {o}, operand_tuple_indices = []>" if len(result_avals) > 1 else
      f"#stablehlo.output_operand_alias<output_tuple_indices = [], operand_index = {o}, "
      f"operand_tuple_indices = []>" for r, o in aliases.items())
  nb = operand_avals[0].ndim - 2 if nb is None else nb
  lay = lambda a: _layout(a, nb, column_major)
  attrs = (f'call_target_name = "{target}", api_version = 4 : i32, '
           f"backend_config = {{{cfg}}}, "
           f"operand_layouts = [{', '.join(lay(a) for a in operand_avals)}], "
           f"result_layouts = [{', '.join(lay(a) for a in result_avals)}], "
           f"output_operand_aliases = [{alias}]")
  return ctx.op("stablehlo.custom_call", list(operands), result_avals, attrs=attrs,
                operand_avals=operand_avals)


def _lapack_call(ctx, fn: str, operands, operand_avals, result_avals, config: dict[str, Any],
                 aliases: dict[int, int], nb: int | None = None, target: str | None = None):
  """A typed-FFI custom call of jaxlib's `lapack_<p><fn>_ffi` (CPU only)."""
  if ctx.module.platform != "cpu":
    raise NotImplementedError(f"lax.linalg: the {fn} decomposition is implemented for CPU "
                              f"(LAPACK) only, not for platform {ctx.module.platform!r}.")
  _ensure_lapack()
  target = target or f"lapack_{_LAPACK_PREFIX[operand_avals[0].dtype]}{fn}_ffi"
  return _ffi_call(ctx, target, operands, operand_avals, result_avals, config, aliases, nb)


def _gpu_prefix(ctx) -> str | None:
  """`'cu'` where the module is lowered for CUDA, `'hip'` for ROCm, else None (CPU)."""
  return {"cuda": "cu", "gpu": "cu", "rocm": "hip"}.get(ctx.module.platform)


def _solver_call(ctx, fn: str, operands, operand_avals, result_avals, config: dict[str, Any],
                 aliases: dict[int, int], column_major: bool = True):
  """A typed-FFI custom call of the GPU solver kernels that jaxlib's CUDA (ROCm) plugin
  registers with XLA: `cusolver_<fn>_ffi` (`hipsolver_<fn>_ffi`); one target per function,
  dispatching on the dtype, with the same column-major layouts as LAPACK's."""
  return _ffi_call(ctx, f"{_gpu_prefix(ctx)}solver_{fn}_ffi", operands, operand_avals,
                   result_avals, config, aliases, column_major=column_major)


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


def _slice(ctx, x, aval: ShapedArray, limits: tuple[int, ...]) -> str:
  """The leading `limits` block of x."""
  r = aval.ndim
  return ctx.op("stablehlo.slice", [x], [aval.update(shape=tuple(limits))],
                attrs=f"start_indices = {lowering.i64_array((0,) * r)}, limit_indices = "
                      f"{lowering.i64_array(limits)}, strides = {lowering.i64_array((1,) * r)}",
                operand_avals=[aval])[0]


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
  set to zero (numpy's tril/triu over the trailing two axes), staged as JAX stages it: an
  iota mask `i + k >= j` (lower) or `i + k - 1 >= j` (upper, selecting zeros there).

  NB: the iotas have the default integer dtype (int64 under x64), as JAX's `lax._tri`, which
  widens them to hold its offset, a default-int scalar."""
  shp = _shape_of(x)
  mn = tuple(shp[-2:])
  idx = dtypes.canonicalize_dtype(np.int64)
  rows = shape.broadcasted_iota(idx, mn, 0)
  rows = ew.add(rows, np.asarray(k if lower else k - 1, idx)[()])
  mask = ew.ge(rows, shape.broadcasted_iota(idx, mn, 1))
  if len(shp) > 2:
    mask = shape.broadcast_in_dim(mask, tuple(shp), (len(shp) - 2, len(shp) - 1))
  zeros = shape.full_like(x, 0)
  return ew.select(mask, x, zeros) if lower else ew.select(mask, zeros, x)


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
  if _gpu_prefix(ctx):
    f, info = _solver_call(ctx, "potrf", [x], [aval], [aval, info_aval], {"lower": True},
                           {0: 0})
  else:
    f, info = _lapack_call(ctx, "potrf", [x], [aval], [aval, info_aval],
                           {"uplo": ord("L")}, {0: 0})
  # NB: potrf leaves the strict upper triangle untouched; `cholesky` zeroes it (as JAX's).
  return [_nan_if_failed(ctx, info, info_aval, f, aval)]


def _cholesky_jvp(primals, tangents):
  """JAX's rule (Murray, "Differentiation of the Cholesky decomposition", arXiv:1602.07527):
  `dL = L phi(L^-1 dA L^-H)`, phi taking the lower triangle with the diagonal halved."""
  x, = primals
  t, = tangents
  L = _tril(cholesky_p.bind(x))
  tmp = triangular_solve(L, t, left_side=False, transpose_a=True, conjugate_a=True, lower=True)
  inner = triangular_solve(L, tmp, left_side=True, transpose_a=False, lower=True)
  return L, _mm(L, _cholesky_phi(inner))


def _cholesky_phi(x):
  """The lower triangle of `x` with its diagonal halved, computed as JAX's rule does:
  `tril(x) / (1 + eye)` (a division: for complex values, multiplying by 0.5 rounds
  differently)."""
  shp, dt = _shape_of(x), _dtype_of(x)
  n, nd = shp[-1], len(shp)
  lower = _tril(x)
  idx = dtypes.canonicalize_dtype(np.int64)
  rows = ew.add(shape.broadcasted_iota(idx, (n, n), 0), np.asarray(0, idx)[()])
  eye = ew.convert_element_type(ew.eq(rows, shape.broadcasted_iota(idx, (n, n), 1)), dt)
  denom = ew.add(np.asarray(1, dt)[()], eye)
  if nd > 2:
    denom = shape.broadcast_in_dim(denom, tuple(shp), (nd - 2, nd - 1))
  return ew.div(lower, denom)


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
  return ew.div(ew.add(x, xt), np.asarray(2, core.get_aval(x).dtype))  # (x + x^H) / 2


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
  return _tril(cholesky_p.bind(x))


# ---------------------------------------------------------------------------
# lu: partial-pivoting LU (getrf): `lu` holds unit-lower L below the diagonal and U on and
# above it; `pivots[i]` is the row swapped with row i (0-based); `permutation` applies the
# swaps in order to the identity (`x[perm] == L @ U`), as JAX's third result.


def _lu_abstract_eval(x: ShapedArray):
  _check_matrix("lu", x)
  m, n = x.shape[-2:]
  return [x.strip_weak_type(), ShapedArray((*_batch(x), min(m, n)), dtypes.int32),
          ShapedArray((*_batch(x), m), dtypes.int32)]


def _lu_lowering(ctx, x):
  aval, piv_aval, perm_aval = ctx.avals_out
  info_aval = ShapedArray(_batch(aval), dtypes.int32)
  m = aval.shape[-2]
  if min(aval.shape[-2:]) == 0:
    f, piv = x, ctx.constant(0, piv_aval)
  else:
    call = _solver_call if _gpu_prefix(ctx) else _lapack_call
    f, piv, info = call(ctx, "getrf", [x], [aval], [aval, piv_aval, info_aval], {}, {0: 0})
    piv = ctx.elementwise("stablehlo.subtract", piv, ctx.constant(1, piv_aval), aval=piv_aval)
    # NB: info > 0 flags an exactly singular U, which is still a valid factorization.
    f = _nan_if_failed(ctx, info, info_aval, f, aval, "GE")
  # The permutation: the pivots' composition, inlined (as JAX's CPU/GPU lowering does).
  perm, = _inline(ctx, lambda p: [_pivots_to_permutation(p, m)], [piv_aval], [piv])
  return [f, piv, perm]


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
  `dLU = L tril(X, -1) + triu(X) U`. The pivots and the permutation have zero (float0)
  tangents."""
  a, = primals
  a_dot, = tangents
  lu_, pivots, perm = lu_p.bind(a)
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
  pa_dot = _mm(_permutation_matrix(perm, dtype), a_dot)
  la = triangular_solve(l, pa_dot, left_side=True, transpose_a=False, lower=True,
                        unit_diagonal=True)
  lau = triangular_solve(u, la, left_side=False, transpose_a=False, lower=False)
  lu_dot = ew.add(_mm(l, _tril(lau, -1)), _mm(_triu(lau), u))
  return [lu_, pivots, perm], [lu_dot, ad.Zero(ad.tangent_aval(core.get_aval(pivots))),
                               ad.Zero(ad.tangent_aval(core.get_aval(perm)))]


lu_p = Primitive("lu")
lu_p.multiple_results = True
lu_p.def_abstract_eval(_lu_abstract_eval)
lowering.register_lowering(lu_p, _lu_lowering)
ad.primitive_jvps[lu_p] = _lu_jvp
_defbatching(lu_p, 2)


def lu_pivots_to_permutation(pivots: Any, permutation_size: int) -> Any:
  """The permutation `perm` (`int32[..., permutation_size]`) made by applying the row swaps
  `i <-> pivots[..., i]` in order to the identity: `a[perm] == l @ u`.

  Args:
    pivots: `int32[..., k]`, 0-based (as `lu` returns them).
    permutation_size: the number of rows, `>= k`.

  Raises:
    TypeError: for pivots that are not int32. ValueError: for `permutation_size < k`.
  """
  return lu_pivots_to_permutation_p.bind(pivots, permutation_size=int(permutation_size))


def _pivots_to_permutation(pivots: Any, permutation_size: int) -> Any:
  """The composition behind `lu_pivots_to_permutation_p`.

  NB: unrolled (one one-hot step per pivot).
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
  f, piv, perm = lu_p.bind(x)
  return f, piv, perm


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
  call = _solver_call if _gpu_prefix(ctx) else _lapack_call
  return call(ctx, "geqrf", [x], [aval], [aval, tau_aval], {}, {0: 0})


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
  if _gpu_prefix(ctx):
    return _solver_call(ctx, "orgqr", [a, taus], list(ctx.avals_in), [aval], {}, {0: 0})
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


def _qr_abstract_eval(x: ShapedArray, *, full_matrices, pivoting=False, use_magma=None):
  _check_matrix("qr", x)
  m, n = x.shape[-2:]
  k = m if full_matrices else min(m, n)
  b = _batch(x)
  outs = [ShapedArray((*b, m, k), x.dtype), ShapedArray((*b, k, n), x.dtype)]
  return outs + [ShapedArray((*b, n), dtypes.int32)] if pivoting else outs


def _qr_composition(x, *, full_matrices, pivoting=False, use_magma=None):
  """q, r (and the column permutation p with pivoting) from geqrf or geqp3, then
  householder_product (JAX's `_qr_lowering`)."""
  aval = core.get_aval(x)
  m, n = aval.shape[-2:]
  nb = aval.ndim - 2
  if m == 0 or n == 0:
    k = m if full_matrices else min(m, n)
    q = _eye_like((*_batch(aval), m, k), aval.dtype)
    r = shape.full((*_batch(aval), k, n), 0, aval.dtype)
    return (q, r, shape.full((*_batch(aval), n), 0, dtypes.int32)) if pivoting else (q, r)
  if pivoting:
    r, p, taus = geqp3(x, shape.full((*_batch(aval), n), 0, dtypes.int32))
    p = ew.sub(p, np.int32(1))  # geqp3's pivots are 1-based
  else:
    r, taus = geqrf(x)
  if m < n:
    q = householder_product(shape.slice(r, (0,) * aval.ndim, (*_batch(aval), m, m)), taus)
  elif full_matrices:
    q = householder_product(shape.pad(r, np.zeros((), aval.dtype)[()],
                                      [(0, 0, 0)] * nb + [(0, 0, 0), (0, m - n, 0)]), taus)
  else:
    q = householder_product(r, taus)
    r = shape.slice(r, (0,) * aval.ndim, (*_batch(aval), n, n))
  return (q, _triu(r), p) if pivoting else (q, _triu(r))


def _qr_lowering(ctx, x, *, full_matrices, pivoting=False, use_magma=None):
  return _inline(ctx, lambda v: _qr_composition(v, full_matrices=full_matrices,
                                                pivoting=pivoting),
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
  lu_, _, perm = lu_p.bind(a)
  y = triangular_solve(lu_, b, left_side=True, lower=False, transpose_a=True,
                       conjugate_a=True)
  y = triangular_solve(lu_, y, left_side=True, lower=True, transpose_a=True, conjugate_a=True,
                       unit_diagonal=True)
  # a[perm] = L U, so a^H = U^H L^H P and x = P^T y.
  return _mm(_T(_permutation_matrix(perm, _dtype_of(a))), y)


def _qr_jvp(primals, tangents, *, full_matrices, pivoting=False, use_magma=None):
  """JAX's `qr_jvp_rule`: the thin rule on the leading square block for wide matrices (with
  `dR2 = dQ^H X2 + Q^H dX2`), and for full_matrices with m > n the completion of dQ from
  Roberts and Roberts, arXiv:2409.13374 (eqs. 32-33). With pivoting, `x[..., :, p] = q r`
  for the (locally constant) permutation p, so the same rule applies to the permuted
  columns; p has a zero (float0) tangent."""
  x, = primals
  dx, = tangents
  if pivoting:
    q, r, p = qr_p.bind(x, full_matrices=full_matrices, pivoting=True, use_magma=use_magma)
    pmat = _T(_permutation_matrix(p, _dtype_of(x)))  # y @ pmat == y[..., :, p]
    dq, dr = _qr_tangents(_mm(x, pmat), _mm(dx, pmat), q, r, full_matrices)
    return [q, r, p], [dq, dr, ad.Zero(ad.tangent_aval(core.get_aval(p)))]
  q, r = qr_p.bind(x, full_matrices=full_matrices, pivoting=False, use_magma=use_magma)
  return [q, r], list(_qr_tangents(x, dx, q, r, full_matrices))


def _qr_tangents(x, dx, q, r, full_matrices):
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
    return dq, shape.concatenate([dr1, dr2], nd - 1)
  q_mn = cols(q, 0, n) if full_matrices else q
  r_nn = rows(r, 0, n) if full_matrices else r
  dq_mn, dr_nn = _thin_qr_jvp(q_mn, r_nn, dx)
  if not full_matrices or m == n:
    return dq_mn, dr_nn
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
  return dq, dr


qr_p = Primitive("qr")
qr_p.multiple_results = True
qr_p.def_abstract_eval(_qr_abstract_eval)
lowering.register_lowering(qr_p, _qr_lowering)
ad.primitive_jvps[qr_p] = _qr_jvp
_defbatching(qr_p, 2)


def qr(x: Any, *, pivoting: bool = False, full_matrices: bool = True,
       use_magma: bool | None = None) -> tuple[Any, ...]:
  """QR decomposition `x = Q @ R` (the `qr` primitive; lowered via geqrf, or geqp3 with
  pivoting, and householder_product, as in JAX).

  Args:
    x: `T[..., m, n]`, T in float32, float64, complex64, complex128.
    pivoting: column pivoting (LAPACK geqp3): also return `p` with `x[..., :, p] = Q @ R`
      and `|diag(R)|` non-increasing.
    full_matrices: Q `[..., m, m]` and R `[..., m, n]`; else Q `[..., m, k]` and R
      `[..., k, n]` with `k = min(m, n)`.
    use_magma: accepted for JAX compatibility (it selects a GPU kernel there); unused.

  Returns:
    `(q, r)`, q with orthonormal columns, r upper triangular; `(q, r, p)` with pivoting,
    p `int32[..., n]`.

  Raises:
    TypeError: for other dtypes. ValueError: for rank < 2 input.
  """
  return tuple(qr_p.bind(x, full_matrices=bool(full_matrices), pivoting=bool(pivoting),
                         use_magma=use_magma))


# ---------------------------------------------------------------------------
# Enums with JAX's names and values (implementation/algorithm choices; on CPU LAPACK is
# always used here).


class EigImplementation(enum.Enum):
  """Implementation of the nonsymmetric eigendecomposition (`eig`)."""
  CUSOLVER = "cusolver"
  MAGMA = "magma"
  LAPACK = "lapack"


class EighImplementation(enum.Enum):
  """Implementation of the Hermitian eigendecomposition (`eigh`)."""
  QR = "qr"
  JACOBI = "jacobi"
  QDWH = "qdwh"


class SvdAlgorithm(enum.Enum):
  """Algorithm of the singular value decomposition (`svd`)."""
  DEFAULT = "default"
  QR = "QR"
  JACOBI = "Jacobi"
  POLAR = "polar"
  DIVIDE_AND_CONQUER = "divide_and_conquer"


# ---------------------------------------------------------------------------
# eigh: eigenvalues (ascending, real) and eigenvectors of Hermitian matrices (syevd/heevd).


def _eigh_abstract_eval(x: ShapedArray, *, lower, sort_eigenvalues, subset_by_index,
                        algorithm=None):
  _check_matrix("eigh", x, square=True)
  if subset_by_index is not None and tuple(subset_by_index) != (0, x.shape[-1]):
    raise NotImplementedError("eigh: subset_by_index is not implemented.")
  return [x.strip_weak_type(),
          ShapedArray(x.shape[:-1], _real_of.get(x.dtype, x.dtype))]


def _eigh_lowering(ctx, x, *, lower, sort_eigenvalues, subset_by_index, algorithm=None):
  v_aval, w_aval = ctx.avals_out
  info_aval = ShapedArray(_batch(v_aval), dtypes.int32)
  if algorithm == EighImplementation.QDWH:
    raise NotImplementedError("QDWH implementation is only supported on TPU")
  if v_aval.shape[-1] == 0:
    return [x, ctx.constant(0, w_aval)]
  if _gpu_prefix(ctx):
    # cuSOLVER syevd (heevd for complex): algorithm 0 lets the kernel choose (Jacobi,
    # syevj, for small matrices), 1 is QR (syevd), 2 Jacobi.
    code = 0 if algorithm is None else 2 if algorithm == EighImplementation.JACOBI else 1
    v, w, info = _solver_call(ctx, "syevd", [x], [v_aval], [v_aval, w_aval, info_aval],
                              {"algorithm": code, "lower": bool(lower)}, {0: 0})
  else:
    if algorithm == EighImplementation.JACOBI:
      raise NotImplementedError("Jacobi implementation is not supported on CPU")
    v, w, info = _lapack_call(ctx, "syevd" if not dtypes.is_complex(v_aval.dtype) else
                              "heevd", [x], [v_aval], [v_aval, w_aval, info_aval],
                              {"mode": ord("V"), "uplo": ord("L" if lower else "U")}, {0: 0})
  return [_nan_if_failed(ctx, info, info_aval, v, v_aval),
          _nan_if_failed(ctx, info, info_aval, w, w_aval)]


def _eigh_jvp(primals, tangents, *, lower, sort_eigenvalues, subset_by_index,
              algorithm=None):
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
                          subset_by_index=subset_by_index, algorithm=algorithm)
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
         sort_eigenvalues: bool = True, subset_by_index: tuple[int, int] | None = None,
         implementation: EighImplementation | None = None):
  """Eigendecomposition of Hermitian `x`: `x @ v = v * w`.

  Args:
    x: `T[..., n, n]`, T in float32, float64, complex64, complex128.
    lower: read the lower (else the upper) triangle when not symmetrizing.
    symmetrize_input: use `(x + x^H) / 2`.
    sort_eigenvalues: accepted; LAPACK and cuSOLVER return ascending eigenvalues.
    implementation: the primitive's `algorithm`: None (the platform's default: LAPACK
      syevd/heevd on CPU; on GPU cuSOLVER chooses, Jacobi for small matrices), `QR`
      (syevd) or `JACOBI` (GPU only: cuSOLVER syevj).

  Returns:
    `(v T[..., n, n], w R[..., n])`: eigenvectors in the columns of `v` and the eigenvalues
    `w` (real dtype R), ascending; NaN where the solver fails to converge.

  Raises:
    NotImplementedError: when lowered, for `JACOBI` on CPU and `QDWH` (TPU only), as JAX.
  """
  if symmetrize_input:
    _check_matrix("eigh", core.get_aval(x), square=True)
    x = _symmetrize(x)
  v, w = eigh_p.bind(x, lower=bool(lower), sort_eigenvalues=bool(sort_eigenvalues),
                     subset_by_index=None if subset_by_index is None else
                     tuple(subset_by_index), algorithm=implementation)
  return v, w


# ---------------------------------------------------------------------------
# svd: singular values (descending) and vectors (gesdd, divide and conquer).


def _svd_abstract_eval(x: ShapedArray, *, full_matrices, compute_uv, subset_by_index,
                       algorithm=None):
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


def _svd_gpu(ctx, x, aval: ShapedArray, full_matrices: bool, compute_uv: bool, algorithm):
  """cuSOLVER's SVD as JAX 0.10.2 calls it: Jacobi (gesvdj) by default for m, n <= 1024
  (NVIDIA, "Fast singular value decomposition on GPUs", GTC 2019, slide 5) and for JACOBI,
  else QR (gesvd, on the transpose where m < n). gesvdj returns V (not V^H) and has no
  economy mode below 32 columns, so thin results are slices of the full ones.
  Returns the names of s, u, vt (None without `compute_uv`) and info."""
  m, n = aval.shape[-2:]
  b = _batch(aval)
  k = min(m, n)
  nb = len(b)
  real = _real_of.get(aval.dtype, aval.dtype)
  s_aval = ShapedArray((*b, k), real)
  info_aval = ShapedArray(b, dtypes.int32)
  if algorithm in (SvdAlgorithm.POLAR, SvdAlgorithm.DIVIDE_AND_CONQUER):
    raise NotImplementedError(f"svd: algorithm={algorithm} is not implemented for "
                              f"platform {ctx.module.platform!r}; use DEFAULT, QR or JACOBI.")
  jacobi = (algorithm == SvdAlgorithm.JACOBI or
            (algorithm in (None, SvdAlgorithm.DEFAULT) and m <= 1024 and n <= 1024))
  if jacobi:
    econ = not full_matrices and m > 32 and n > 32
    u_aval = ShapedArray((*b, m, k if econ else m), aval.dtype)
    v_aval = ShapedArray((*b, n, k if econ else n), aval.dtype)
    _, s, u, v, info = _solver_call(ctx, "gesvdj", [x], [aval],
                                    [aval, s_aval, u_aval, v_aval, info_aval],
                                    {"compute_uv": bool(compute_uv),
                                     "full_matrices": not econ}, {0: 0})
    if not compute_uv:
      return s, None, None, info
    vt_aval = ShapedArray((*b, v_aval.shape[-1], n), aval.dtype)
    vt = ctx.op("stablehlo.transpose", [v], [vt_aval],
                attrs=f"permutation = array<i64: {', '.join(map(str, (*range(nb), nb + 1, nb)))}>",
                operand_avals=[v_aval])[0]
    if dtypes.is_complex(aval.dtype):
      vt = ctx.op("stablehlo.complex", [
          ctx.op("stablehlo.real", [vt], [vt_aval.update(dtype=real)], operand_avals=[vt_aval])[0],
          ctx.elementwise("stablehlo.negate", ctx.op(
              "stablehlo.imag", [vt], [vt_aval.update(dtype=real)], operand_avals=[vt_aval])[0],
              aval=vt_aval.update(dtype=real))],
          [vt_aval], operand_avals=[vt_aval.update(dtype=real)] * 2)[0]
    if not full_matrices and not econ:
      u = _slice(ctx, u, u_aval, (*b, m, k))
      vt = _slice(ctx, vt, vt_aval, (*b, k, n))
    return s, u, vt, info
  transposed = m < n
  if compute_uv:
    u_aval = ShapedArray((*b, m, m if full_matrices else k), aval.dtype)
    vt_aval = ShapedArray((*b, n if full_matrices else k, n), aval.dtype)
  else:
    u_aval = vt_aval = ShapedArray((), aval.dtype)
  # NB: with m < n the kernel factors the row-major view of x, i.e. x^T = V S U^T: its "u"
  # result read row-major is vt, its "vt" is u.
  outs = [aval, s_aval, vt_aval, u_aval] if transposed else [aval, s_aval, u_aval, vt_aval]
  _, s, r2, r3, info = _solver_call(ctx, "gesvd", [x], [aval], [*outs, info_aval],
                                    {"compute_uv": bool(compute_uv),
                                     "full_matrices": bool(full_matrices),
                                     "transposed": transposed}, {0: 0},
                                    column_major=not transposed)
  if not compute_uv:
    return s, None, None, info
  return (s, r3, r2, info) if transposed else (s, r2, r3, info)


def _svd_lowering(ctx, x, *, full_matrices, compute_uv, subset_by_index, algorithm=None):
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
  if _gpu_prefix(ctx):
    s, u, vt, info = _svd_gpu(ctx, x, aval, full_matrices, compute_uv, algorithm)
  elif algorithm in (SvdAlgorithm.JACOBI, SvdAlgorithm.POLAR):
    raise NotImplementedError("The SVD Jacobi and Polar algorithms are not implemented on "
                              "CPU.")
  else:
    mode = ord("N") if not compute_uv else ord("A") if full_matrices else ord("S")
    fn = "gesvd" if algorithm == SvdAlgorithm.QR else "gesdd"
    _, s, u, vt, info = _lapack_call(ctx, fn, [x], [aval],
                                     [aval, s_aval, u_aval, vt_aval, info_aval],
                                     {"mode": mode}, {0: 0})
  outs = [_nan_if_failed(ctx, info, info_aval, s, s_aval)]
  if compute_uv:
    outs += [_nan_if_failed(ctx, info, info_aval, u, u_aval),
             _nan_if_failed(ctx, info, info_aval, vt, vt_aval)]
  return outs


def _svd_jvp(primals, tangents, *, full_matrices, compute_uv, subset_by_index,
             algorithm=None):
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
                        subset_by_index=subset_by_index, algorithm=algorithm)
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
        subset_by_index: tuple[int, int] | None = None,
        algorithm: SvdAlgorithm | None = None):
  """Singular value decomposition `x = u @ diag(s) @ vt`.

  Args:
    x: `T[..., m, n]`, T in float32, float64, complex64, complex128.
    full_matrices: u `[..., m, m]`, vt `[..., n, n]`; else `[..., m, k]`, `[..., k, n]`.
    compute_uv: also return u and vt.
    algorithm: on CPU None, DEFAULT or DIVIDE_AND_CONQUER (LAPACK gesdd) or QR (gesvd);
      on GPU (cuSOLVER) None/DEFAULT (Jacobi, gesvdj, for m, n <= 1024, else gesvd),
      QR (gesvd) or JACOBI (gesvdj).

  Returns:
    `(u, s, vt)` as JAX orders them (the primitive's outputs are `[s, u, vt]`), or `s`
    alone (`R[..., k]`, descending, real dtype R); NaN where the solver fails.

  Raises:
    NotImplementedError: when lowered, for JACOBI or POLAR on CPU, POLAR or
      DIVIDE_AND_CONQUER on a CUDA GPU (as JAX).
  """
  outs = svd_p.bind(x, full_matrices=bool(full_matrices), compute_uv=bool(compute_uv),
                    subset_by_index=None if subset_by_index is None else
                    tuple(subset_by_index), algorithm=algorithm)
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
  if (ctx.module.platform == "cpu" and a_aval.dtype in _LAPACK_PREFIX
      and a_aval.shape[:-2] == b_aval.shape[:-2]):
    # As JAX on CPU: LAPACK's trsm (XLA's own triangular_solve expansion is much slower).
    flag = {"NO_TRANSPOSE": ord("N"), "TRANSPOSE": ord("T"), "ADJOINT": ord("C")}[t]
    return _lapack_call(ctx, "trsm", [a, b], [a_aval, b_aval], [b_aval],
                        {"side": ord("L" if left_side else "R"),
                         "uplo": ord("L" if lower else "U"), "trans_x": flag,
                         "diag": ord("U" if unit_diagonal else "N")}, {0: 1})
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
    b: `T[..., n, k]` (left_side) or `T[..., k, n]`; or, as in JAX, a batch of vectors
      `T[..., n]` (one rank less than `a`), solved as the matrix `T[..., n, 1]` (left_side)
      or `T[..., 1, n]`.
    transpose_a, conjugate_a: `op(a)` is `a`, `a^T`, `conj(a)` or `a^H` (`conjugate_a` is
      dropped for a real `a`, as JAX does).
    unit_diagonal: assume ones on the diagonal of `a` (it is not read).

  Returns:
    `x`, shaped like `b`.

  Raises:
    TypeError: for other dtypes, differing dtypes, or shapes that do not fit.
  """
  a_aval, b_aval = core.get_aval(a), core.get_aval(b)
  conjugate_a = bool(conjugate_a) and dtypes.is_complex(a_aval.dtype)
  vector = b_aval.ndim == a_aval.ndim - 1
  if vector:
    b = shape.expand_dims(b, (-1 if left_side else -2,))
  out = triangular_solve_p.bind(a, b, left_side=bool(left_side), lower=bool(lower),
                                transpose_a=bool(transpose_a), conjugate_a=conjugate_a,
                                unit_diagonal=bool(unit_diagonal))
  if vector:
    nd = b_aval.ndim + 1
    out = shape.squeeze(out, (nd - 1 if left_side else nd - 2,))
  return out


# ---------------------------------------------------------------------------
# Helpers shared by the primitives below.


def _require_cpu(ctx, name: str, kernel: str) -> None:
  """LAPACK-only primitives: a clear error on other platforms (no GPU kernel here)."""
  if ctx.module.platform != "cpu":
    raise NotImplementedError(
        f"lax.linalg.{name} is implemented on CPU only (LAPACK {kernel}); there is no "
        f"kernel for platform {ctx.module.platform!r}. Run it on a CPU device (e.g. "
        f"jit(f, device=stagecraft.devices('cpu')[0])).")


def _no_jvp(name: str):
  """The JVP rule of a primitive that JAX does not differentiate either."""
  def rule(primals, tangents, **params):
    raise NotImplementedError(f"Differentiation rule for '{name}' not implemented (JAX does "
                              f"not differentiate lax.linalg.{name} either).")
  return rule


def _complex_of(dtype) -> np.dtype:
  return dtypes.complex128 if dtype in (dtypes.float64, dtypes.complex128) else dtypes.complex64


def _solve(a, b):
  """Solves `a x = b` for square `a[..., n, n]` and `b[..., n, k]` by LU with partial
  pivoting (lu_p, then two triangular solves): differentiable."""
  lu_, _, perm = lu_p.bind(a)
  pb = _mm(_permutation_matrix(perm, _dtype_of(a)), b)
  y = triangular_solve(lu_, pb, left_side=True, lower=True, unit_diagonal=True)
  return triangular_solve(lu_, y, left_side=True, lower=False)


def _sum_axis(x, axis: int):
  return reduction.reduce_sum(x, (axis % len(_shape_of(x)),))


# ---------------------------------------------------------------------------
# eig: eigenvalues and left/right eigenvectors of general square matrices (geev).


def _eig_abstract_eval(x: ShapedArray, *, compute_left_eigenvectors,
                       compute_right_eigenvectors, enable_eigvec_derivs, implementation):
  _check_matrix("eig", x, square=True)
  c = _complex_of(x.dtype)
  count = bool(compute_left_eigenvectors) + bool(compute_right_eigenvectors)
  return [ShapedArray(x.shape[:-1], c)] + [ShapedArray(x.shape, c)] * count


def _eig_lowering(ctx, x, *, compute_left_eigenvectors, compute_right_eigenvectors,
                  enable_eigvec_derivs, implementation):
  # NB: JAX runs eig on GPUs with jaxlib's hybrid kernels (`cuhybrid_eig_real`/`_comp`,
  # host LAPACK or MAGMA); emitted without `jaxlib.gpu_solver.initialize_hybrid_kernels()`
  # first they crashed the process on an H100, and they are not yet checked with it.
  gpu = _gpu_prefix(ctx)
  if gpu is None:
    _require_cpu(ctx, "eig", "geev")
    if implementation not in (None, EigImplementation.LAPACK):
      raise ValueError("Only the lapack implementation is supported on CPU.")
  elif implementation == EigImplementation.CUSOLVER:
    raise NotImplementedError("lax.linalg.eig: implementation=CUSOLVER (cusolver geev) is "
                              "not implemented in stagecraft; use None (the hybrid kernel).")
  aval, = ctx.avals_in
  w_aval = ctx.avals_out[0]
  v_aval = ShapedArray(aval.shape, w_aval.dtype)
  if aval.shape[-1] == 0:
    return [ctx.constant(0, a) for a in ctx.avals_out]
  info_aval = ShapedArray(_batch(aval), dtypes.int32)
  real = not dtypes.is_complex(aval.dtype)
  flags = {"compute_left": ord("V" if compute_left_eigenvectors else "N"),
           "compute_right": ord("V" if compute_right_eigenvectors else "N")}
  if gpu is None:
    call = lambda outs: _lapack_call(ctx, "geev", [x], [aval], outs, flags, {})
  else:
    # JAX 0.10.2 on GPUs: jaxlib's hybrid kernel (geev on the host, or MAGMA), same results
    # as LAPACK's (JAX uses cuSOLVER's geev instead where cuSOLVER >= 11.7.1 and no left
    # eigenvectors are requested; not here).
    _ensure_hybrid_kernels()
    magma = _magma_mode(None if implementation is None else
                        implementation == EigImplementation.MAGMA)
    target = f"{gpu}hybrid_eig_{'real' if real else 'comp'}"
    gflags = {"left": bool(compute_left_eigenvectors),
              "magma": magma, "right": bool(compute_right_eigenvectors)}
    call = lambda outs: _ffi_call(ctx, target, [x], [aval], outs, gflags, {})
  if real:
    wr_aval = ShapedArray(aval.shape[:-1], aval.dtype)
    wr, wi, vl, vr, info = call([wr_aval, wr_aval, v_aval, v_aval, info_aval])
    w = ctx.op("stablehlo.complex", [wr, wi], [w_aval], operand_avals=[wr_aval, wr_aval])[0]
  else:
    w, vl, vr, info = call([w_aval, v_aval, v_aval, info_aval])
  outs = [_nan_if_failed(ctx, info, info_aval, w, w_aval)]
  if compute_left_eigenvectors:
    outs.append(_nan_if_failed(ctx, info, info_aval, vl, v_aval))
  if compute_right_eigenvectors:
    outs.append(_nan_if_failed(ctx, info, info_aval, vr, v_aval))
  return outs


def _eig_vectors_jvp(w, v, da):
  """Tangents of eigenvalues `w` and eigenvectors `v` (columns) of `a` along `da`, from
  first-order perturbation theory: with `P = V^-1 dA V`, `dw = diag(P)` and
  `dV = V (F * P) + V diag(c)`, `F[i, j] = 1 / (w[j] - w[i])` off the diagonal. The free
  multiples `c` keep LAPACK's normalisation (unit 2-norm, largest-magnitude component
  real): `Re(c_j) = -Re(v_j^H u_j)`, `Im(c_j) = -Im(u_kj) / v_kj` with
  `u = V (F * P)` and `k = argmax_i |v_ij|`."""
  shp = _shape_of(v)
  n = shp[-1]
  nd = len(shp)
  dtype = _dtype_of(v)
  eye = _eye_like(shp, dtype)
  fmat = ew.sub(ew.div(shape.full(shp, 1, dtype),
                       ew.add(eye, ew.sub(_rows(w, n), _cols(w, n)))), eye)
  p = _mm(_solve(v, da), v)
  dw = _extract_diagonal(p)
  u = _mm(v, ew.mul(fmat, p))
  absv = ew.abs(v)
  # one-hot of the largest-magnitude component of each column (the first on ties)
  colmax = shape.broadcast_in_dim(reduction.reduce_max(absv, (nd - 2,)), shp,
                                  (*range(nd - 2), nd - 1))
  is_max = ew.eq(absv, colmax)
  iota = shape.broadcasted_iota(dtypes.int32, shp, nd - 2)
  first = reduction.reduce_min(ew.select(is_max, iota, shape.full(shp, n, dtypes.int32)),
                               (nd - 2,))
  mask = _astype(ew.eq(iota, shape.broadcast_in_dim(first, shp, (*range(nd - 2), nd - 1))),
                 dtype)
  re_c = ew.neg(ew.real(_sum_axis(ew.mul(ew.conj(v), u), -2)))
  im_c = ew.neg(ew.div(ew.imag(_sum_axis(ew.mul(mask, u), -2)),
                       ew.real(_sum_axis(ew.mul(mask, v), -2))))
  c = ew.complex(re_c, im_c)
  return dw, ew.add(u, ew.mul(v, _rows(c, n)))


def _eig_jvp(primals, tangents, *, compute_left_eigenvectors, compute_right_eigenvectors,
             enable_eigvec_derivs, implementation):
  """Eigenvalue tangents `dw = diag(V^-1 dA V)` always; eigenvector tangents (see
  `_eig_vectors_jvp`; left ones from `A^H`) only with `enable_eigvec_derivs`, as in JAX."""
  a, = primals
  da, = tangents
  if (compute_left_eigenvectors or compute_right_eigenvectors) and not enable_eigvec_derivs:
    raise NotImplementedError(
        "Derivatives of non-symmetric eigenvectors are only valid under assumptions on the "
        "input that cannot be checked (distinct eigenvalues, no ties for the largest "
        "component of an eigenvector). Pass enable_eigvec_derivs=True to "
        "lax.linalg.eig to opt in, or differentiate only the eigenvalues "
        "(compute_left_eigenvectors=False, compute_right_eigenvectors=False).")
  params = dict(enable_eigvec_derivs=enable_eigvec_derivs, implementation=implementation)
  outs = eig_p.bind(a, compute_left_eigenvectors=compute_left_eigenvectors,
                    compute_right_eigenvectors=True, **params)
  w, vr = outs[0], outs[-1]
  da = _astype(da, _dtype_of(vr))
  if not (compute_left_eigenvectors or compute_right_eigenvectors):
    return [w], [_sum_axis(ew.mul(_solve(vr, da), _T(vr)), -1)]
  dw, dvr = _eig_vectors_jvp(w, vr, da)
  primal_out, tangent_out = [w], [dw]
  if compute_left_eigenvectors:
    _, dvl = _eig_vectors_jvp(ew.conj(w), outs[1], _H(da))
    primal_out.append(outs[1])
    tangent_out.append(dvl)
  if compute_right_eigenvectors:
    primal_out.append(vr)
    tangent_out.append(dvr)
  return primal_out, tangent_out


eig_p = Primitive("eig")
eig_p.multiple_results = True
eig_p.def_abstract_eval(_eig_abstract_eval)
lowering.register_lowering(eig_p, _eig_lowering)
ad.primitive_jvps[eig_p] = _eig_jvp
_defbatching(eig_p, 2)


def eig(x: Any, *, compute_left_eigenvectors: bool = True,
        compute_right_eigenvectors: bool = True, enable_eigvec_derivs: bool = False,
        implementation: EigImplementation | None = None,
        use_magma: bool | None = None) -> list[Any]:
  """Eigendecomposition of general square matrices (LAPACK geev on CPU; on GPUs jaxlib's
  hybrid kernel, geev on the host or MAGMA's).

  Args:
    x: `T[..., n, n]`, T in float32, float64, complex64, complex128.
    compute_left_eigenvectors: also return `vl` (`vl[..., :, j]^H x = w[j] vl[..., :, j]^H`).
    compute_right_eigenvectors: also return `vr` (`x vr[..., :, j] = w[j] vr[..., :, j]`).
    enable_eigvec_derivs: allow differentiating the eigenvectors (valid only for distinct
      eigenvalues; the tangent keeps geev's normalisation).
    implementation: None or `EigImplementation.LAPACK`; on GPUs also `MAGMA` (None: the
      `jax_use_magma` option). `CUSOLVER` (cuSOLVER's geev) raises NotImplementedError.
    use_magma: deprecated in JAX; `True` selects MAGMA (GPUs only), `False` LAPACK.

  Returns:
    `[w, vl, vr]` (the vectors only where requested): `w C[..., n]` and `v C[..., n, n]`
    with C the complex dtype of T; eigenvectors have unit 2-norm with their
    largest-magnitude component real. NaN where LAPACK fails.

  Raises:
    TypeError: for other dtypes. ValueError: for non-square input.
    NotImplementedError: for `EigImplementation.CUSOLVER`, on platforms other than CPU
      and CUDA/ROCm, and for eigenvector derivatives without `enable_eigvec_derivs`.
  """
  if use_magma is not None:
    implementation = EigImplementation.MAGMA if use_magma else EigImplementation.LAPACK
  return list(eig_p.bind(x, compute_left_eigenvectors=bool(compute_left_eigenvectors),
                         compute_right_eigenvectors=bool(compute_right_eigenvectors),
                         enable_eigvec_derivs=bool(enable_eigvec_derivs),
                         implementation=implementation))


# ---------------------------------------------------------------------------
# schur: `x = Q T Q^H` with T upper (quasi-)triangular (gees). Not differentiable (as JAX).


def _schur_abstract_eval(x: ShapedArray, *, compute_schur_vectors, sort_eig_vals,
                         select_callable):
  _check_matrix("schur", x, square=True)
  x = x.strip_weak_type()
  return [x, x] if compute_schur_vectors else [x]


def _schur_lowering(ctx, x, *, compute_schur_vectors, sort_eig_vals, select_callable):
  _require_cpu(ctx, "schur", "gees")
  if sort_eig_vals:
    raise NotImplementedError("The sort feature of LAPACK's gees routine is not "
                              "implemented.")
  aval, = ctx.avals_in
  if aval.shape[-1] == 0:
    return [x] * len(ctx.avals_out)
  info_aval = ShapedArray(_batch(aval), dtypes.int32)
  w_aval = ShapedArray(aval.shape[:-1], aval.dtype)
  ws = [w_aval] * (1 if dtypes.is_complex(aval.dtype) else 2)
  flags = {"mode": ord("V" if compute_schur_vectors else "N"), "sort": ord("N")}
  t, vs, *_, info = _lapack_call(ctx, "gees", [x], [aval],
                                 [aval, aval, *ws, info_aval, info_aval], flags, {0: 0})
  outs = [_nan_if_failed(ctx, info, info_aval, t, aval)]
  if compute_schur_vectors:
    outs.append(_nan_if_failed(ctx, info, info_aval, vs, aval))
  return outs


schur_p = Primitive("schur")
schur_p.multiple_results = True
schur_p.def_abstract_eval(_schur_abstract_eval)
lowering.register_lowering(schur_p, _schur_lowering)
ad.primitive_jvps[schur_p] = _no_jvp("schur")
_defbatching(schur_p, 2)


def schur(x: Any, *, compute_schur_vectors: bool = True, sort_eig_vals: bool = False,
          select_callable: Any = None) -> tuple[Any, ...]:
  """Schur decomposition `x = Q @ T @ Q^H` (LAPACK gees, CPU only).

  Args:
    x: `T[..., n, n]`, T in float32, float64, complex64, complex128.
    compute_schur_vectors: also return Q.
    sort_eig_vals: must be False (sorting is not implemented, as in JAX).
    select_callable: unused (as in JAX).

  Returns:
    `(T, Q)` or `(T,)`: T upper triangular (complex input) or quasi upper triangular with
    2x2 blocks for complex-conjugate eigenvalue pairs (real input); Q unitary. NaN where
    LAPACK fails.

  Raises:
    NotImplementedError: for `sort_eig_vals`, on platforms other than CPU, and under
      differentiation.
  """
  return tuple(schur_p.bind(x, compute_schur_vectors=bool(compute_schur_vectors),
                            sort_eig_vals=bool(sort_eig_vals),
                            select_callable=select_callable))


# ---------------------------------------------------------------------------
# hessenberg: reduction to upper Hessenberg form by Householder reflections (gehrd).


def _hessenberg_abstract_eval(x: ShapedArray):
  _check_matrix("hessenberg", x, square=True)
  return [x.strip_weak_type(),
          ShapedArray((*_batch(x), max(x.shape[-1] - 1, 0)), x.dtype)]


def _hessenberg_lowering(ctx, x):
  _require_cpu(ctx, "hessenberg", "gehrd")
  aval, tau_aval = ctx.avals_out
  n = aval.shape[-1]
  if n == 0:
    return [x, ctx.constant(0, tau_aval)]
  info_aval = ShapedArray(_batch(aval), dtypes.int32)
  a, taus, info = _lapack_call(ctx, "gehrd", [x], [aval], [aval, tau_aval, info_aval],
                               {"high": np.int32(n), "low": np.int32(1)}, {0: 0})
  return [_nan_if_failed(ctx, info, info_aval, a, aval),
          _nan_if_failed(ctx, info, info_aval, taus, tau_aval)]


hessenberg_p = Primitive("hessenberg")
hessenberg_p.multiple_results = True
hessenberg_p.def_abstract_eval(_hessenberg_abstract_eval)
lowering.register_lowering(hessenberg_p, _hessenberg_lowering)
ad.primitive_jvps[hessenberg_p] = _no_jvp("hessenberg")
_defbatching(hessenberg_p, 2)


def hessenberg(a: Any) -> tuple[Any, Any]:
  """Reduces square matrices to upper Hessenberg form (LAPACK gehrd, CPU only).

  Args:
    a: `T[..., n, n]`, T in float32, float64, complex64, complex128.

  Returns:
    `(a, taus)`: the Hessenberg matrix in the upper triangle and first subdiagonal of
    `a T[..., n, n]`, the Householder reflectors below it, and their scales
    `taus T[..., n - 1]` (`Q = householder_product` of them, shifted by one row).

  Raises:
    NotImplementedError: on platforms other than CPU, and under differentiation.
  """
  return tuple(hessenberg_p.bind(a))


# ---------------------------------------------------------------------------
# tridiagonal: reduction of Hermitian matrices to real symmetric tridiagonal form (sytrd,
# hetrd).


def _tridiagonal_abstract_eval(a: ShapedArray, *, lower):
  _check_matrix("tridiagonal", a, square=True)
  n = a.shape[-1]
  if n == 0:
    raise ValueError(f"The input to tridiagonal must be a non-empty square matrix. Got "
                     f"{a.str_short()}.")
  b = _batch(a)
  r = _real_of.get(a.dtype, a.dtype)
  return [a.strip_weak_type(), ShapedArray((*b, n), r), ShapedArray((*b, n - 1), r),
          ShapedArray((*b, n - 1), a.dtype)]


def _tridiagonal_lowering(ctx, a, *, lower):
  avals = ctx.avals_out
  info_aval = ShapedArray(_batch(avals[0]), dtypes.int32)
  if _gpu_prefix(ctx):   # cuSOLVER sytrd (hetrd for complex), as JAX's
    *outs, info = _solver_call(ctx, "sytrd", [a], list(ctx.avals_in), [*avals, info_aval],
                               {"lower": bool(lower)}, {0: 0})
    return [_nan_if_failed(ctx, info, info_aval, o, av) for o, av in zip(outs, avals)]
  _require_cpu(ctx, "tridiagonal", "sytrd/hetrd")
  fn = "hetrd" if dtypes.is_complex(avals[0].dtype) else "sytrd"
  *outs, info = _lapack_call(ctx, fn, [a], list(ctx.avals_in), [*avals, info_aval],
                             {"uplo": ord("L" if lower else "U")}, {0: 0})
  return [_nan_if_failed(ctx, info, info_aval, o, av) for o, av in zip(outs, avals)]


tridiagonal_p = Primitive("tridiagonal")
tridiagonal_p.multiple_results = True
tridiagonal_p.def_abstract_eval(_tridiagonal_abstract_eval)
lowering.register_lowering(tridiagonal_p, _tridiagonal_lowering)
ad.primitive_jvps[tridiagonal_p] = _no_jvp("tridiagonal")
_defbatching(tridiagonal_p, 2)


def tridiagonal(a: Any, *, lower: bool = True) -> tuple[Any, Any, Any, Any]:
  """Reduces Hermitian matrices to tridiagonal form `a = Q T Q^H` (LAPACK sytrd/hetrd, CPU
  only).

  Args:
    a: `T[..., n, n]` (n >= 1); only the `lower` (else upper) triangle is read.

  Returns:
    `(a, d, e, taus)`: `a T[..., n, n]` holds T's diagonal and first sub- (super-)
    diagonal with the Householder reflectors below (above) them; `d R[..., n]` the
    diagonal and `e R[..., n - 1]` the off-diagonal of T (R real); `taus T[..., n - 1]`.

  Raises:
    ValueError: for empty or non-square input. NotImplementedError: on platforms other
      than CPU, and under differentiation.
  """
  return tuple(tridiagonal_p.bind(a, lower=bool(lower)))


# ---------------------------------------------------------------------------
# tridiagonal_solve: A X = B with A tridiagonal (gtsv: LU with partial pivoting).


def _tridiagonal_solve_abstract_eval(dl, d, du, b, *, perturb_singular):
  for name, v in (("dl", dl), ("d", d), ("du", du), ("b", b)):
    if v.dtype not in _LAPACK_PREFIX:
      raise TypeError(f"tridiagonal_solve does not accept dtype {v.dtype.name} for {name}; "
                      f"accepted: float32, float64, complex64, complex128.")
  if not (dl.dtype == d.dtype == du.dtype == b.dtype):
    raise TypeError(f"tridiagonal_solve requires arguments of one dtype, got "
                    f"{dl.dtype.name}, {d.dtype.name}, {du.dtype.name} and {b.dtype.name}.")
  if dl.shape != d.shape or dl.shape != du.shape:
    raise TypeError("tridiagonal_solve requires that all diagonal arguments have the same "
                    f"shape, got {dl.str_short()}, {d.str_short()} and {du.str_short()}.")
  if b.ndim < 2 or dl.shape != b.shape[:-1]:
    raise TypeError("tridiagonal_solve requires that the leading ndim-1 dimensions of b "
                    f"equal the dimensions of the diagonal arguments, got {b.str_short()} "
                    f"and diagonals {d.str_short()}.")
  return b.strip_weak_type()


def _small_tridiagonal_solve(dl, d, du, b):
  """Solves a tridiagonal system of size m <= 2 (cuSPARSE's gtsv2 needs m >= 3) by Cramer's
  rule: `x = b / d` (m = 1), else the 2x2 inverse `[[d1, -du0], [-dl1, d0]] / det`."""
  m = _shape_of(d)[-1]
  col = lambda v, i: shape.expand_dims(shape.slice_in_dim(v, i, i + 1, axis=len(_shape_of(v)) - 1),
                                       (len(_shape_of(v)),))
  if m == 1:
    return ew.div(b, col(d, 0))
  d0, d1, du0, dl1 = col(d, 0), col(d, 1), col(du, 0), col(dl, 1)
  nd = len(_shape_of(b))
  b0 = shape.slice_in_dim(b, 0, 1, axis=nd - 2)
  b1 = shape.slice_in_dim(b, 1, 2, axis=nd - 2)
  det = ew.sub(ew.mul(d0, d1), ew.mul(du0, dl1))
  x0 = ew.div(ew.sub(ew.mul(d1, b0), ew.mul(du0, b1)), det)
  x1 = ew.div(ew.sub(ew.mul(d0, b1), ew.mul(dl1, b0)), det)
  return shape.concatenate([x0, x1], nd - 2)


def _tridiagonal_solve_lowering(ctx, dl, d, du, b, *, perturb_singular):
  avals = list(ctx.avals_in)
  b_aval = avals[3]
  nb = b_aval.ndim - 2
  if b_aval.size == 0:
    return [b]
  prefix = _gpu_prefix(ctx)
  if prefix and perturb_singular:   # jaxlib's GPU kernel (no status output), as JAX's
    return _ffi_call(ctx, f"{prefix}_tridiagonal_solve_perturbed", [dl, d, du, b], avals,
                     [b_aval], {}, {}, nb=nb)
  if prefix and avals[1].shape[-1] <= 2:
    return _inline(ctx, lambda *xs: [_small_tridiagonal_solve(*xs)], avals, [dl, d, du, b])
  if prefix:   # cuSPARSE gtsv2 (no pivoting), in place in b
    return _ffi_call(ctx, f"{prefix}sparse_gtsv2_ffi", [dl, d, du, b], avals, [b_aval], {},
                     {0: 3}, nb=nb)
  _require_cpu(ctx, "tridiagonal_solve", "gtsv")
  if perturb_singular:
    return _lapack_call(ctx, "gtsv", [dl, d, du, b], avals, [b_aval], {}, {}, nb=nb,
                        target="tridiagonal_solve_perturbed_ffi")
  info_aval = ShapedArray(_batch(b_aval), dtypes.int32)
  *_, x, info = _lapack_call(ctx, "gtsv", [dl, d, du, b], avals, [*avals, info_aval], {},
                             {0: 0, 1: 1, 2: 2, 3: 3}, nb=nb)
  return [_nan_if_failed(ctx, info, info_aval, x, b_aval)]


def _tridiagonal_product(dl, d, du, x):
  """`A x` for tridiagonal A (`dl[i] = A[i, i-1]`, `d[i] = A[i, i]`, `du[i] = A[i, i+1]`)
  and `x[..., m, k]`."""
  shp = _shape_of(x)
  nd = len(shp)
  m = shp[-2]
  dims = tuple(range(nd - 1))
  zero = np.zeros((), _dtype_of(x))[()]
  pad = [(0, 0, 0)] * (nd - 2)
  y = ew.mul(shape.broadcast_in_dim(d, shp, dims), x)
  if m > 1:
    x_up = shape.pad(shape.slice_in_dim(x, 0, m - 1, axis=nd - 2), zero,
                     [*pad, (1, 0, 0), (0, 0, 0)])      # x[i-1] at row i
    x_down = shape.pad(shape.slice_in_dim(x, 1, m, axis=nd - 2), zero,
                       [*pad, (0, 1, 0), (0, 0, 0)])    # x[i+1] at row i
    y = ew.add(y, ew.mul(shape.broadcast_in_dim(dl, shp, dims), x_up))
    y = ew.add(y, ew.mul(shape.broadcast_in_dim(du, shp, dims), x_down))
  return y


def _tridiagonal_solve_jvp(primals, tangents, *, perturb_singular):
  """`dX = A^-1 (dB - dA X)`, with `dA` the tridiagonal matrix of the diagonals' tangents."""
  dl, d, du, b = primals
  *diag_dots, b_dot = tangents
  x = tridiagonal_solve_p.bind(dl, d, du, b, perturb_singular=perturb_singular)
  if all(type(t) is ad.Zero for t in diag_dots):
    rhs = b_dot
  else:
    prod = _tridiagonal_product(*[ad.instantiate_zeros(t) for t in diag_dots], x)
    rhs = ew.neg(prod) if type(b_dot) is ad.Zero else ew.sub(b_dot, prod)
  if type(rhs) is ad.Zero:
    return x, rhs
  return x, tridiagonal_solve_p.bind(dl, d, du, rhs, perturb_singular=perturb_singular)


def _tridiagonal_solve_transpose(ct, dl, d, du, b, *, perturb_singular):
  """Linear in `b`: the transpose solves with `A^T`, whose diagonals are `d`, `du` shifted
  down (sub) and `dl` shifted up (super)."""
  if any(ad.is_undefined_primal(v) for v in (dl, d, du)):
    raise ValueError("tridiagonal_solve is linear in b only; it cannot be transposed in "
                     "its diagonals.")
  if type(ct) is ad.Zero:
    return [None, None, None, ad.Zero(b.aval)]
  nd = len(_shape_of(d))
  m = _shape_of(d)[-1]
  zero = np.zeros((), _dtype_of(d))[()]
  pad = [(0, 0, 0)] * (nd - 1)
  dl_t = shape.pad(shape.slice_in_dim(du, 0, m - 1, axis=nd - 1), zero, [*pad, (1, 0, 0)])
  du_t = shape.pad(shape.slice_in_dim(dl, 1, m, axis=nd - 1), zero, [*pad, (0, 1, 0)])
  return [None, None, None, tridiagonal_solve_p.bind(dl_t, d, du_t, ct,
                                                     perturb_singular=perturb_singular)]


def _tridiagonal_solve_batch_rule(batched_args, batch_dims, *, perturb_singular):
  """With only `b` batched, its batch axis joins b's columns (one solve, more right-hand
  sides); otherwise all operands are aligned at a leading batch dim."""
  dl, d, du, b = batched_args
  *ddims, bdb = batch_dims
  if all(v is None for v in ddims):
    nd = len(_shape_of(b))
    b = batching.moveaxis(b, bdb, nd - 1)
    shp = _shape_of(b)
    flat = shape.reshape(b, (*shp[:-2], shp[-2] * shp[-1]))
    out = tridiagonal_solve_p.bind(dl, d, du, flat, perturb_singular=perturb_singular)
    return shape.reshape(out, shp), nd - 1
  args, bdim = _leading_bdims(list(batched_args), list(batch_dims), (1, 1, 1, 2))
  return tridiagonal_solve_p.bind(*args, perturb_singular=perturb_singular), bdim


tridiagonal_solve_p = Primitive("tridiagonal_solve")
tridiagonal_solve_p.def_abstract_eval(_tridiagonal_solve_abstract_eval)
lowering.register_lowering(tridiagonal_solve_p, _tridiagonal_solve_lowering)
ad.primitive_jvps[tridiagonal_solve_p] = _tridiagonal_solve_jvp
ad.primitive_transposes[tridiagonal_solve_p] = _tridiagonal_solve_transpose
batching.primitive_batchers[tridiagonal_solve_p] = _tridiagonal_solve_batch_rule


def tridiagonal_solve(dl: Any, d: Any, du: Any, b: Any, *,
                      perturb_singular: bool = False) -> Any:
  """Solves `A X = B` for tridiagonal A (LAPACK gtsv, CPU only).

  Args:
    dl: `T[..., m]`, the subdiagonal: `dl[i] = A[i, i-1]` (`dl[0]` is ignored, 0 by
      convention).
    d: `T[..., m]`, the diagonal.
    du: `T[..., m]`, the superdiagonal: `du[i] = A[i, i+1]` (`du[m-1]` is ignored).
    b: `T[..., m, k]`, the right-hand sides.
    perturb_singular: perturb tiny pivots (by about `eps * max|U|`) so that singular
      systems give finite results (jaxlib's perturbed kernel).

  Returns:
    `X T[..., m, k]`; NaN where A is singular (without `perturb_singular`).

  Raises:
    TypeError: for mismatched shapes or dtypes. NotImplementedError: on platforms other
      than CPU.
  """
  return tridiagonal_solve_p.bind(dl, d, du, b, perturb_singular=bool(perturb_singular))


# ---------------------------------------------------------------------------
# ormqr: multiplies by Q from geqrf's reflectors without forming it (ormqr/unmqr).


def _ormqr_abstract_eval(a, taus, c, *, left, transpose):
  _check_matrix("ormqr", a)
  _check_matrix("ormqr", c)
  if not (a.dtype == taus.dtype == c.dtype):
    raise TypeError(f"ormqr requires a, taus and c of one dtype, got {a.dtype.name}, "
                    f"{taus.dtype.name} and {c.dtype.name}.")
  m = a.shape[-2]
  if left and c.shape[-2] != m:
    raise ValueError("ormqr with left=True expects c to have the same number of rows as the "
                     f"Householder matrix a. Got a {a.str_short()} and c {c.str_short()}.")
  if not left and c.shape[-1] != m:
    raise ValueError("ormqr with left=False expects c to have the same number of columns as "
                     f"the Householder matrix a has rows. Got a {a.str_short()} and c "
                     f"{c.str_short()}.")
  if taus.shape[:-1] != _batch(a) or taus.shape[-1] > min(a.shape[-2:]) or (
      _batch(c) != _batch(a)):
    raise ValueError(f"ormqr: taus must be [..., k] with k <= min(m, n) and a, taus and c "
                     f"must share batch dimensions, got a {a.str_short()}, taus "
                     f"{taus.str_short()}, c {c.str_short()}.")
  return c.strip_weak_type()


def _ormqr_lowering(ctx, a, taus, c, *, left, transpose):
  c_aval, = ctx.avals_out
  if c_aval.size == 0 or ctx.avals_in[1].shape[-1] == 0:
    return [c]
  if _gpu_prefix(ctx):   # cuSOLVER ormqr (unmqr for complex), as JAX's
    return _solver_call(ctx, "ormqr", [a, taus, c], list(ctx.avals_in), [c_aval],
                        {"left": bool(left), "transpose": bool(transpose)}, {0: 2})
  _require_cpu(ctx, "ormqr", "ormqr/unmqr")
  fn = "unmqr" if dtypes.is_complex(c_aval.dtype) else "ormqr"
  return _lapack_call(ctx, fn, [a, taus, c], list(ctx.avals_in), [c_aval],
                      {"left": bool(left), "transpose": bool(transpose)}, {0: 2})


ormqr_p = Primitive("ormqr")
ormqr_p.def_abstract_eval(_ormqr_abstract_eval)
lowering.register_lowering(ormqr_p, _ormqr_lowering)
ad.primitive_jvps[ormqr_p] = _no_jvp("ormqr")
_defbatching(ormqr_p, 2, 1, 2)


def ormqr(a: Any, taus: Any, c: Any, *, left: bool = True, transpose: bool = False) -> Any:
  """`Q @ c`, `Q^H @ c`, `c @ Q` or `c @ Q^H` for Q given by Householder reflectors (as
  geqrf returns them), without forming Q (LAPACK ormqr/unmqr, CPU only).

  Args:
    a: `T[..., m, n]`, the reflectors below the diagonal.
    taus: `T[..., k]`, their scales.
    c: `T[..., m, p]` (left) or `T[..., p, m]`.
    left: multiply from the left (else the right).
    transpose: use `Q^T` (`Q^H` for complex dtypes).

  Returns:
    The product, shaped like `c`.

  Raises:
    ValueError: for shapes that do not fit. NotImplementedError: on platforms other than
      CPU, and under differentiation.
  """
  return ormqr_p.bind(a, taus, c, left=bool(left), transpose=bool(transpose))


# ---------------------------------------------------------------------------
# geqp3: QR with column pivoting; the `qr(..., pivoting=True)` building block.


def _geqp3_abstract_eval(a: ShapedArray, jpvt: ShapedArray, *, use_magma):
  _check_matrix("geqp3", a)
  if jpvt.dtype != dtypes.int32 or jpvt.shape != (*_batch(a), a.shape[-1]):
    raise TypeError(f"geqp3: jpvt must be int32[..., n] matching a {a.str_short()}, got "
                    f"{jpvt.str_short()}.")
  return [a.strip_weak_type(), jpvt, ShapedArray((*_batch(a), min(a.shape[-2:])), a.dtype)]


def _geqp3_lowering(ctx, a, jpvt, *, use_magma):
  gpu = _gpu_prefix(ctx)
  if gpu is not None:  # JAX 0.10.2: jaxlib's hybrid kernel (host LAPACK or MAGMA)
    _ensure_hybrid_kernels()
    return _ffi_call(ctx, f"{gpu}hybrid_geqp3", [a, jpvt], list(ctx.avals_in),
                     list(ctx.avals_out), {"magma": _magma_mode(use_magma)}, {0: 0, 1: 1})
  _require_cpu(ctx, "qr (pivoting=True)", "geqp3")
  return _lapack_call(ctx, "geqp3", [a, jpvt], list(ctx.avals_in), list(ctx.avals_out), {},
                      {0: 0, 1: 1})


geqp3_p = Primitive("geqp3")
geqp3_p.multiple_results = True
geqp3_p.def_abstract_eval(_geqp3_abstract_eval)
lowering.register_lowering(geqp3_p, _geqp3_lowering)
ad.primitive_jvps[geqp3_p] = _no_jvp("geqp3")
_defbatching(geqp3_p, 2, 1)


def geqp3(a: Any, jpvt: Any, *, use_magma: bool | None = None) -> tuple[Any, Any, Any]:
  """LAPACK's geqp3: `(a, jpvt, taus)` with R above the diagonal of `a`, the reflectors
  below it, and 1-based column pivots `jpvt` (`a[..., :, jpvt - 1] = Q R`); columns with a
  nonzero input `jpvt` are moved to the front first."""
  return tuple(geqp3_p.bind(a, jpvt, use_magma=use_magma))


# ---------------------------------------------------------------------------
# lu_pivots_to_permutation as a primitive (JAX's), lowered to the unrolled composition.


def _lu_pivots_to_permutation_abstract_eval(pivots: ShapedArray, *, permutation_size):
  if pivots.dtype != dtypes.int32 or pivots.ndim < 1:
    raise TypeError(f"lu_pivots_to_permutation requires int32[..., k] pivots, got "
                    f"{pivots.str_short()}.")
  if permutation_size < pivots.shape[-1]:
    raise ValueError(f"Output permutation size {permutation_size} has to exceed the "
                     f"trailing dimension of the pivots. Got pivots {pivots.str_short()}.")
  return ShapedArray((*pivots.shape[:-1], permutation_size), dtypes.int32)


def _lu_pivots_to_permutation_lowering(ctx, pivots, *, permutation_size):
  return _inline(ctx, lambda p: [_pivots_to_permutation(p, permutation_size)],
                 ctx.avals_in, [pivots])


lu_pivots_to_permutation_p = Primitive("lu_pivots_to_permutation")
lu_pivots_to_permutation_p.def_abstract_eval(_lu_pivots_to_permutation_abstract_eval)
lowering.register_lowering(lu_pivots_to_permutation_p, _lu_pivots_to_permutation_lowering)
ad.defjvp_zero(lu_pivots_to_permutation_p)
_defbatching(lu_pivots_to_permutation_p, 1)


# ---------------------------------------------------------------------------
# cholesky_update: the Cholesky factor of `R^T R + w w^T` in O(n^2) (Givens rotations).


def _cholesky_update_abstract_eval(r: ShapedArray, w: ShapedArray):
  if r.dtype not in (dtypes.float32, dtypes.float64) or w.dtype != r.dtype:
    raise TypeError(f"cholesky_update requires float32 or float64 arguments of one dtype, "
                    f"got {r.dtype.name} and {w.dtype.name}.")
  if r.ndim < 2 or r.shape[-1] != r.shape[-2] or w.shape != r.shape[:-1]:
    raise ValueError("Rank-1 update to Cholesky decomposition takes a square matrix and a "
                     f"vector of the same size as input. Got shapes {r.shape} and "
                     f"{w.shape} instead")
  return r.strip_weak_type()


def _cholesky_update_composition(r, z):
  """Row k of R and z are rotated so that z[k] becomes 0 (Golub & Van Loan, "Matrix
  Computations", sec. 6.5.4): with `rho = hypot(R[k, k], z[k])`,
  `R[k] <- (R[k, k] R[k] + z[k] z) / rho` and `z <- (R[k, k] z - z[k] R[k]) / rho`;
  a zero `z[k]` leaves both unchanged. Unrolled over the n rows; leading batch dims."""
  shp = _shape_of(r)
  nd = len(shp)
  n = shp[-1]
  dtype = _dtype_of(r)
  vshape = shp[:-1]
  one, zero = np.ones((), dtype)[()], np.zeros((), dtype)[()]
  for k in range(n):
    row = shape.squeeze(shape.slice_in_dim(r, k, k + 1, axis=nd - 2), (nd - 2,))
    x = shape.squeeze(shape.slice_in_dim(row, k, k + 1, axis=nd - 2), (nd - 2,))
    y = shape.squeeze(shape.slice_in_dim(z, k, k + 1, axis=nd - 2), (nd - 2,))
    is_zero = ew.eq(y, zero)
    big = ew.max(ew.abs(x), ew.abs(y))
    safe_big = ew.select(is_zero, shape.full(_shape_of(big), 1, dtype), big)
    xs, ys = ew.div(x, safe_big), ew.div(y, safe_big)
    inv = ew.rsqrt(ew.add(ew.mul(xs, xs), ew.mul(ys, ys)))
    c = ew.select(is_zero, shape.full(_shape_of(x), one, dtype), ew.mul(xs, inv))
    s = ew.select(is_zero, shape.full(_shape_of(x), zero, dtype), ew.mul(ys, inv))
    cb = shape.broadcast_in_dim(c, vshape, tuple(range(nd - 2)))
    sb = shape.broadcast_in_dim(s, vshape, tuple(range(nd - 2)))
    new_row = ew.add(ew.mul(cb, row), ew.mul(sb, z))
    z = ew.sub(ew.mul(cb, z), ew.mul(sb, row))
    mask = _matrix_const(np.arange(n)[:, None] == k, shp, np.bool_)
    r = ew.select(mask, shape.broadcast_in_dim(new_row, shp, (*range(nd - 2), nd - 1)), r)
  return r


def _cholesky_update_lowering(ctx, r, w):
  return _inline(ctx, lambda a, b: [_cholesky_update_composition(a, b)], ctx.avals_in,
                 [r, w])


def _cholesky_update_jvp(primals, tangents):
  """The JVP of the composition (differentiable where JAX's is not)."""
  tangents = [ad.instantiate_zeros(t) if type(t) is ad.Zero else t for t in tangents]
  (out,), (t_out,) = ad.jvp_flat(lambda a, b: [_cholesky_update_composition(a, b)],
                                 list(primals), tangents)
  return cholesky_update_p.bind(*primals), t_out


cholesky_update_p = Primitive("cholesky_update")
cholesky_update_p.def_abstract_eval(_cholesky_update_abstract_eval)
lowering.register_lowering(cholesky_update_p, _cholesky_update_lowering)
ad.primitive_jvps[cholesky_update_p] = _cholesky_update_jvp
_defbatching(cholesky_update_p, 2, 1)


def cholesky_update(r_matrix: Any, w_vector: Any) -> Any:
  """The upper Cholesky factor of `R^T R + w w^T`, given upper `R` (`A = R^T R`), in
  O(n^2) (Givens rotations).

  Args:
    r_matrix: `T[..., n, n]`, upper triangular, T float32 or float64.
    w_vector: `T[..., n]`.

  Returns:
    `T[..., n, n]`, upper triangular with a positive diagonal (where R's is positive).

  Raises:
    TypeError: for other dtypes. ValueError: for shapes that do not fit.
  """
  return cholesky_update_p.bind(r_matrix, w_vector)


# ---------------------------------------------------------------------------
# symmetric_product: alpha A A^T + beta C (syrk).


def _symmetric_product_abstract_eval(a: ShapedArray, c: ShapedArray, *, alpha, beta):
  if a.dtype not in _LAPACK_PREFIX or c.dtype != a.dtype:
    raise TypeError(f"symmetric_product requires arguments of one floating dtype, got "
                    f"{a.dtype.name} and {c.dtype.name}.")
  if (a.ndim < 2 or c.ndim < 2 or c.shape[-1] != c.shape[-2] or a.shape[-2] != c.shape[-1]
      or _batch(a) != _batch(c)):
    raise ValueError("symmetric_product expects a rectangular matrix of shape (m, n) and a "
                     f"square matrix of shape (m, m). Got shapes {a.shape} and {c.shape}.")
  return c.strip_weak_type()


def _symmetric_product_composition(a, c, *, alpha, beta):
  dtype = _dtype_of(a)
  prod = ew.mul(_mm(a, _T(a)), np.asarray(alpha, dtype)[()])
  return ew.add(prod, ew.mul(c, np.asarray(beta, dtype)[()]))


def _symmetric_product_lowering(ctx, a, c, *, alpha, beta):
  return _inline(ctx, lambda x, y: [_symmetric_product_composition(x, y, alpha=alpha,
                                                                   beta=beta)],
                 ctx.avals_in, [a, c])


def _symmetric_product_jvp(primals, tangents, *, alpha, beta):
  """`alpha (dA A^T + A dA^T) + beta dC`."""
  a, c = primals
  da, dc = tangents
  out = symmetric_product_p.bind(a, c, alpha=alpha, beta=beta)
  dtype = _dtype_of(a)
  t = ad.Zero(ad.tangent_aval(core.get_aval(out)))
  if type(da) is not ad.Zero:
    prod = _mm(da, _T(a))
    t = ew.mul(ew.add(prod, _T(prod)), np.asarray(alpha, dtype)[()])
  if type(dc) is not ad.Zero:
    t = ad.add_tangents(t, ew.mul(dc, np.asarray(beta, dtype)[()]))
  return out, t


symmetric_product_p = Primitive("symmetric_product")
symmetric_product_p.def_abstract_eval(_symmetric_product_abstract_eval)
lowering.register_lowering(symmetric_product_p, _symmetric_product_lowering)
ad.primitive_jvps[symmetric_product_p] = _symmetric_product_jvp
_defbatching(symmetric_product_p, 2, 2)


def symmetric_product(a_matrix: Any, c_matrix: Any, *, alpha: float = 1.,
                      beta: float = 0., symmetrize_output: bool = False) -> Any:
  """`alpha A A^T + beta C` for `A T[..., m, n]` and symmetric `C T[..., m, m]`.

  Args:
    symmetrize_output: copy the lower triangle onto the upper one (the full product is
      computed here, so this only matters for a non-symmetric `C`).

  Returns:
    `T[..., m, m]`.

  Raises:
    TypeError: for non-floating or differing dtypes. ValueError: for shapes that do not fit.
  """
  out = symmetric_product_p.bind(a_matrix, c_matrix, alpha=float(alpha), beta=float(beta))
  if symmetrize_output:
    out = ew.add(_tril(out), _T(_tril(out, -1)))
  return out


# ---------------------------------------------------------------------------
# qdwh: the polar decomposition by the QR-based dynamically weighted Halley iteration.


def qdwh(x: Any, *, is_hermitian: bool = False, max_iterations: int | None = None,
         eps: float | None = None, dynamic_shape: tuple[int, int] | None = None):
  """Polar decomposition `x = u @ h` by the QDWH iteration.

  Args:
    x: `T[m, n]` with m >= n, T in float32, float64, complex64, complex128.
    is_hermitian: `x` is Hermitian (accepted; the iteration is the same).
    max_iterations: the iteration limit (default 10).
    eps: the working precision used in the stopping test (default: `finfo(T).eps`).
    dynamic_shape: not supported (must be None).

  Returns:
    `(u, h, num_iters, is_converged)`: `u T[m, n]` with orthonormal columns, `h T[n, n]`
    Hermitian positive semidefinite, the int32 number of iterations and a bool.

  Raises:
    ValueError: for input of rank other than 2 or with m < n. TypeError: for other dtypes.
    NotImplementedError: for `dynamic_shape`.

  Algorithm: Nakatsukasa, Bai and Gygi, "Optimizing Halley's iteration for computing the
  matrix polar decomposition", SIAM J. Matrix Anal. Appl. 31 (2010), with the QR-based
  step while the weight c > 100 and the Cholesky-based one after it (Nakatsukasa and
  Higham, SIAM J. Sci. Comput. 35 (2013)). x is scaled by `sqrt(|x|_1 |x|_inf)` (an upper
  bound of its 2-norm) and the lower bound of its smallest singular value starts at eps.
  The loop stops when `|1 - l| <= 10 eps` and `|u_k - u_{k-1}|_F <= (5 eps)^(1/3)`.
  """
  aval = core.get_aval(x)
  _check_matrix("qdwh", aval)
  if aval.ndim != 2:
    raise ValueError(f"qdwh requires a matrix (rank 2), got {aval.str_short()}; use vmap "
                     f"for batches.")
  m, n = aval.shape
  if m < n:
    raise ValueError(f"The input matrix of shape M x N must have M >= N. Got {aval.shape}. "
                     f"Decompose the conjugate transpose instead.")
  if dynamic_shape is not None:
    raise NotImplementedError("qdwh: dynamic_shape is not supported.")
  dtype = aval.dtype
  rdtype = _real_of.get(dtype, dtype)
  max_iterations = 10 if max_iterations is None else int(max_iterations)
  eps = float(np.finfo(rdtype).eps) if eps is None else float(eps)
  r = lambda v: np.asarray(v, rdtype)[()]  # noqa: E731
  absx = ew.abs(x)
  norm1 = reduction.reduce_max(reduction.reduce_sum(absx, (0,)), (0,))
  norminf = reduction.reduce_max(reduction.reduce_sum(absx, (1,)), (0,))
  alpha = ew.sqrt(ew.mul(norm1, norminf))
  alpha = ew.select(ew.eq(alpha, r(0)), r(1), alpha)
  u0 = ew.div(x, _astype(alpha, dtype))
  eye_n = _eye_like((n, n), dtype)
  tol_l, tol_norm = r(10 * eps), r((5 * eps) ** (1 / 3))

  def qr_step(u, a, b, c):
    sqrt_c = ew.sqrt(c)
    y = shape.concatenate([ew.mul(u, _astype(sqrt_c, dtype)), eye_n], 0)
    q, _ = qr(y, full_matrices=False)
    q1 = shape.slice(q, (0, 0), (m, n))
    q2 = shape.slice(q, (m, 0), (m + n, n))
    e = ew.div(b, c)
    return ew.add(ew.mul(u, _astype(e, dtype)),
                  ew.mul(_mm(q1, _H(q2)), _astype(ew.div(ew.sub(a, e), sqrt_c), dtype)))

  def chol_step(u, a, b, c):
    z = ew.add(eye_n, ew.mul(_mm(_H(u), u), _astype(c, dtype)))
    w = cholesky(z, symmetrize_input=False)
    v = triangular_solve(w, u, left_side=False, lower=True, transpose_a=True,
                         conjugate_a=True)
    v = triangular_solve(w, v, left_side=False, lower=True)
    e = ew.div(b, c)
    return ew.add(ew.mul(u, _astype(e, dtype)), ew.mul(v, _astype(ew.sub(a, e), dtype)))

  def body(carry):
    k, u, l, _ = carry
    l2 = ew.mul(l, l)
    dd = ew.cbrt(ew.div(ew.mul(r(4), ew.sub(ew.div(r(1), l2), r(1))), l2))
    sqd = ew.sqrt(ew.add(r(1), dd))
    a = ew.add(sqd, ew.div(ew.sqrt(ew.add(ew.sub(r(8), ew.mul(r(4), dd)),
                                          ew.div(ew.mul(r(8), ew.sub(r(2), l2)),
                                                 ew.mul(l2, sqd)))), r(2)))
    b = ew.div(ew.mul(ew.sub(a, r(1)), ew.sub(a, r(1))), r(4))
    c = ew.sub(ew.add(a, b), r(1))
    u_new = cond(ew.gt(c, r(100)), qr_step, chol_step, u, a, b, c)
    l_new = ew.div(ew.mul(l, ew.add(a, ew.mul(b, l2))), ew.add(r(1), ew.mul(c, l2)))
    diff = ew.sub(u_new, u)
    dnorm = ew.sqrt(reduction.reduce_sum(_real_part(ew.mul(diff, ew.conj(diff)) if
                                                    dtypes.is_complex(dtype) else
                                                    ew.mul(diff, diff)), (0, 1)))
    converged = ew.bitwise_and(ew.le(ew.abs(ew.sub(r(1), l_new)), tol_l),
                               ew.le(dnorm, tol_norm))
    return ew.add(k, np.int32(1)), u_new, ew.min(l_new, r(1)), converged

  def keep_going(carry):
    k, _, _, converged = carry
    return ew.bitwise_and(ew.lt(k, np.int32(max_iterations)), ew.bitwise_not(converged))

  init = (np.int32(0), u0, r(eps), np.asarray(False))
  k, u, _, converged = while_loop(keep_going, body, init)
  h = _mm(_H(u), x)
  h = ew.mul(ew.add(h, _H(h)), np.asarray(0.5, dtype)[()])
  return u, h, k, converged
