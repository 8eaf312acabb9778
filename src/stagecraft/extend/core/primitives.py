"""`stagecraft.extend.core.primitives`: stagecraft's built-in primitives under their names in
JAX's `jax.extend.core.primitives`, so that rules and jaxpr walkers written against JAX find
them (`eqn.primitive is primitives.add_p`). Each name is the very object stagecraft binds.

Renamed: `add_jaxvals_p` is `interpreters.ad.add_any_p` (named `add_any` in both); `jit_p` is
`pjit.jit_p` (JAX's former `pjit_p`); `remat_p` is `ad_checkpoint.remat_p` (named
`checkpoint` here, `remat2` in JAX). `call_p` is JAX's `core.call_p`, a `CallPrimitive`
named "call" (nothing in stagecraft binds it; its equations hold a `ClosedJaxpr`, as every
`CallPrimitive`'s, where JAX's hold an open `Jaxpr`).

JAX primitives stagecraft does not have (what it does instead):
  get_p, swap_p: mutable array references (`new_ref`) are threaded through the loops and
    branches that use them (`lax.control_flow.refs`), not staged as primitives;
  select_and_scatter_p: only `select_and_scatter_add` (the gradient of max pooling) exists.
"""
from __future__ import annotations

from stagecraft.ad_checkpoint import name_p, remat_p
from stagecraft.custom_derivatives import custom_jvp_call_p, custom_lin_p, custom_vjp_call_p
from stagecraft.interpreters.ad import add_any_p as add_jaxvals_p
from stagecraft.interpreters.calls import call_p, closed_call_p
from stagecraft.lax.ad_util import stop_gradient_p
from stagecraft.lax.control_flow.conditionals import cond_p, empty2_p
from stagecraft.lax.control_flow.loops import scan_p
from stagecraft.lax.control_flow.solves import linear_solve_p
from stagecraft.lax.control_flow.while_op import while_p
from stagecraft.lax.conv import conv_general_dilated_p
from stagecraft.lax.cumulative import (cumlogsumexp_p, cummax_p, cummin_p, cumprod_p,
                                       cumsum_p)
from stagecraft.lax.dot import dot_general_p
from stagecraft.lax.elementwise import (
    abs_p, acos_p, acosh_p, add_p, and_p, asin_p, asinh_p, atan2_p, atan_p, atanh_p,
    bitcast_convert_type_p, cbrt_p, ceil_p, clamp_p, clz_p, complex_p, conj_p,
    convert_element_type_p, cos_p, cosh_p, div_p, eq_p, erf_inv_p, erf_p, erfc_p, exp2_p,
    exp_p, expm1_p, floor_p, ge_p, gt_p, imag_p, integer_pow_p, is_finite_p, le_p, log1p_p,
    log_p, logistic_p, lt_p, max_p, min_p, mul_p, ne_p, neg_p, nextafter_p, not_p, or_p,
    population_count_p, pow_p, real_p, reduce_precision_p, rem_p, round_p, rsqrt_p,
    select_n_p, shift_left_p, shift_right_arithmetic_p, shift_right_logical_p, sign_p, sin_p,
    sinh_p, sqrt_p, square_p, sub_p, tan_p, tanh_p, xor_p)
from stagecraft.lax.fft import fft_p
from stagecraft.lax.linalg import (cholesky_p, eig_p, eigh_p, hessenberg_p,
                                   householder_product_p, lu_p, qr_p, schur_p, svd_p,
                                   triangular_solve_p, tridiagonal_p, tridiagonal_solve_p)
from stagecraft.lax.misc import after_all_p, copy_p, create_token_p, rng_uniform_p
from stagecraft.lax.parallel import (all_gather_p, all_to_all_p, axis_index_p, pmax_p, pmin_p,
                                     ppermute_p, psum_p, ragged_all_to_all_p)
from stagecraft.lax.prng import (random_bits_p, random_fold_in_p, random_seed_p,
                                 random_split_p)
from stagecraft.lax.random_gamma import random_gamma_p
from stagecraft.lax.random_bits import rng_bit_generator_p, threefry2x32_p
from stagecraft.lax.reduction import (argmax_p, argmin_p, reduce_and_p, reduce_max_p,
                                      reduce_min_p, reduce_or_p, reduce_p, reduce_prod_p,
                                      reduce_sum_p, reduce_xor_p)
from stagecraft.lax.shape import (broadcast_in_dim_p, concatenate_p, iota_p, pad_p, reshape_p,
                                  rev_p, slice_p, squeeze_p, transpose_p)
from stagecraft.lax.slicing import (dynamic_slice_p, dynamic_update_slice_p, gather_p,
                                    scatter_add_p, scatter_max_p, scatter_min_p, scatter_mul_p,
                                    scatter_p)
from stagecraft.lax.sort import approx_top_k_p, eq_to_p, le_to_p, lt_to_p, sort_p, top_k_p
from stagecraft.lax.special import (bessel_i0e_p, bessel_i1e_p, digamma_p, igamma_grad_a_p,
                                    igamma_p, igammac_p, lgamma_p, polygamma_p,
                                    regularized_incomplete_beta_p, zeta_p)
from stagecraft.lax.spmd import device_put_p, sharding_constraint_p
from stagecraft.lax.windowed import (reduce_window_max_p, reduce_window_min_p, reduce_window_p,
                                     reduce_window_sum_p, select_and_gather_add_p,
                                     select_and_scatter_add_p)
from stagecraft.pjit import jit_p

__all__ = sorted(n for n in dir() if n.endswith("_p"))

#: JAX's former name of `jit_p` (libraries that support older JAX versions look it up).
pjit_p = jit_p
