"""`stagecraft.experimental.sparse`: sparse arrays, as JAX's `jax.experimental.sparse`.

Formats: `BCOO` (batched coordinate; the main one), `BCSR` (batched compressed rows), and
the older `COO`, `CSR`, `CSC`. Each operation is a primitive with JAX's name and params
(`bcoo_dot_general_p`, ...), so that `jit`, `grad`, `vmap` and `make_jaxpr` work and print as
JAX's. `sparsify(f)` runs a function written for dense arrays on sparse ones, by
interpreting its jaxpr with sparse rules per primitive.

  >>> import stagecraft.numpy as jnp
  >>> from stagecraft.experimental import sparse
  >>> M = sparse.BCOO.fromdense(jnp.array([[0., 1., 0.], [2., 0., 3.]]))
  >>> M
  BCOO(float32[2, 3], nse=3)
  >>> (M @ jnp.ones(3)).tolist()
  [1.0, 5.0]
"""
from stagecraft.experimental.sparse._base import JAXSparse
from stagecraft.experimental.sparse.util import (CuSparseEfficiencyWarning, SparseEfficiencyError,
                                                 SparseEfficiencyWarning)
from stagecraft.experimental.sparse.bcoo import (
    BCOO, bcoo_broadcast_in_dim, bcoo_concatenate, bcoo_conv_general_dilated, bcoo_dot_general,
    bcoo_dot_general_p, bcoo_dot_general_sampled, bcoo_dot_general_sampled_p,
    bcoo_dynamic_slice, bcoo_extract, bcoo_extract_p, bcoo_fromdense, bcoo_fromdense_p,
    bcoo_gather, bcoo_multiply_dense, bcoo_multiply_sparse, bcoo_reduce_sum, bcoo_reshape,
    bcoo_rev, bcoo_slice, bcoo_sort_indices, bcoo_sort_indices_p, bcoo_spdot_general_p,
    bcoo_squeeze, bcoo_sum_duplicates, bcoo_sum_duplicates_p, bcoo_todense, bcoo_todense_p,
    bcoo_transpose, bcoo_transpose_p, bcoo_update_layout)
from stagecraft.experimental.sparse.api import empty, eye, todense, todense_p
from stagecraft.experimental.sparse.transform import SparseTracer, sparsify
from stagecraft.experimental.sparse.ad import grad, jacfwd, jacobian, jacrev, value_and_grad
from stagecraft.experimental.sparse.bcsr import (
    BCSR, bcsr_broadcast_in_dim, bcsr_concatenate, bcsr_dot_general, bcsr_dot_general_p,
    bcsr_extract, bcsr_extract_p, bcsr_fromdense, bcsr_fromdense_p, bcsr_sum_duplicates,
    bcsr_todense, bcsr_todense_p)
from stagecraft.experimental.sparse.coo import (
    COO, coo_fromdense, coo_fromdense_p, coo_matmat, coo_matmat_p, coo_matvec, coo_matvec_p,
    coo_todense, coo_todense_p)
from stagecraft.experimental.sparse.csr import (
    CSC, CSR, csr_fromdense, csr_fromdense_p, csr_matmat, csr_matmat_p, csr_matvec,
    csr_matvec_p, csr_todense, csr_todense_p)
from stagecraft.experimental.sparse.random import random_bcoo
from stagecraft.experimental.sparse import (ad, api, bcoo, bcsr, coo, csr, linalg, random,
                                            transform, util)

__all__ = ["JAXSparse", "BCOO", "SparseEfficiencyError", "SparseEfficiencyWarning",
           "CuSparseEfficiencyWarning", "bcoo", "todense", "todense_p", "empty", "eye",
           "bcoo_broadcast_in_dim", "bcoo_concatenate", "bcoo_conv_general_dilated",
           "bcoo_dot_general", "bcoo_dot_general_p", "bcoo_dot_general_sampled",
           "bcoo_dot_general_sampled_p", "bcoo_dynamic_slice", "bcoo_extract", "bcoo_extract_p",
           "bcoo_fromdense", "bcoo_fromdense_p", "bcoo_gather", "bcoo_multiply_dense",
           "bcoo_multiply_sparse", "bcoo_reduce_sum", "bcoo_reshape", "bcoo_rev", "bcoo_slice",
           "bcoo_sort_indices", "bcoo_sort_indices_p", "bcoo_spdot_general_p", "bcoo_squeeze",
           "bcoo_sum_duplicates", "bcoo_sum_duplicates_p", "bcoo_todense", "bcoo_todense_p",
           "bcoo_transpose", "bcoo_transpose_p", "bcoo_update_layout", "sparsify",
           "SparseTracer", "grad", "value_and_grad", "jacfwd", "jacrev", "jacobian", "ad",
           "api", "transform", "util", "BCSR", "bcsr_broadcast_in_dim", "bcsr_concatenate",
           "bcsr_dot_general", "bcsr_dot_general_p", "bcsr_extract", "bcsr_extract_p",
           "bcsr_fromdense", "bcsr_fromdense_p", "bcsr_sum_duplicates", "bcsr_todense",
           "bcsr_todense_p", "COO", "coo_fromdense", "coo_fromdense_p", "coo_matmat",
           "coo_matmat_p", "coo_matvec", "coo_matvec_p", "coo_todense", "coo_todense_p", "CSC",
           "CSR", "csr_fromdense", "csr_fromdense_p", "csr_matmat", "csr_matmat_p",
           "csr_matvec", "csr_matvec_p", "csr_todense", "csr_todense_p", "random_bcoo", "bcsr",
           "coo", "csr", "linalg", "random"]
