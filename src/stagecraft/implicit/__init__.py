"""Implicit arrays (`ImplicitArray`, `register`, `use_implicit`/`implicit`, `ste`) and
quantized weights (`stagecraft.implicit.quantization`: `ArrayNF4`, `Array8bit`).

See `stagecraft.implicit.core` for the evaluator and `stagecraft.implicit.higher_order` for
how jit/cond/while/scan/custom calls carry implicit operands.
"""
from stagecraft.implicit.core import (ImplicitArray, MaterializationError,  # noqa: F401
                                      MaterializationWarning, Stacked, StraightThrough,
                                      aux_field, eval_jaxpr_implicit, find_primitive,
                                      flatten_one_implicit_layer, implicit, implicit_depth,
                                      materialize, process_primitive, register,
                                      register_higher_order, stack, ste,
                                      tree_flatten_with_implicit, tree_leaves_with_implicit,
                                      tree_map_with_implicit, tree_structure_with_implicit,
                                      use_implicit)
from stagecraft.implicit import higher_order  # noqa: F401  (installs the handlers)

__all__ = ["ImplicitArray", "MaterializationError", "MaterializationWarning", "Stacked",
           "StraightThrough", "aux_field", "eval_jaxpr_implicit", "find_primitive",
           "flatten_one_implicit_layer", "implicit", "implicit_depth", "materialize",
           "process_primitive", "register", "register_higher_order", "stack", "ste",
           "tree_flatten_with_implicit",
           "tree_leaves_with_implicit", "tree_map_with_implicit", "tree_structure_with_implicit",
           "use_implicit"]
