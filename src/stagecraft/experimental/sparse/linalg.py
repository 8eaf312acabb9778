"""Sparse linear algebra (JAX's `jax.experimental.sparse.linalg`): `spsolve` (a cuSolver
kernel in JAX, GPU only) and `lobpcg_standard`."""
from __future__ import annotations

from typing import Any

__all__ = ["spsolve", "lobpcg_standard"]


def spsolve(data: Any, indices: Any, indptr: Any, b: Any, tol: float = 1e-6,
            reorder: int = 1) -> Any:
  """Solves `A x = b` for a CSR matrix `A` (JAX's `spsolve`, which calls cuSolver's sparse
  QR on GPUs only).

  Raises:
    NotImplementedError: always: stagecraft, like JAX on CPU, has no sparse direct solver.
  """
  raise NotImplementedError("spsolve is only implemented for GPU (cuSolver); stagecraft "
                            "has no sparse direct solver. Use scipy.sparse.linalg.cg or "
                            "solve the dense system.")


def lobpcg_standard(A: Any, X: Any, m: int = 100, tol: Any = None):
  """JAX's LOBPCG eigensolver; not implemented in stagecraft.

  Raises:
    NotImplementedError: always.
  """
  raise NotImplementedError("lobpcg_standard is not implemented in stagecraft")
