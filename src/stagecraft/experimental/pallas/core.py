"""Pallas (JAX's `jax.experimental.pallas`) in interpret mode: the block specifications, the
grid, the kernel refs and `pallas_call`.

A `pallas_call(kernel, out_shape, grid=..., in_specs=..., out_specs=...)(*args)` traces the
kernel once, on refs holding one block of each operand and result (`KernelRef`, a
stagecraft `Ref` local to that trace, so reads and writes are discharged as they are traced:
the kernel becomes a function from the blocks' values to their final values), and binds one
`pallas_call` equation. Its lowering is JAX's interpret mode (`pallas_call(...,
interpret=True)`): a `while_loop` over every point of the grid (row-major, the last grid axis
fastest), which reads the blocks named by each BlockSpec's `index_map(*program_ids)` with
`dynamic_slice`, runs the kernel's function on them and writes every block back with
`dynamic_update_slice` (inputs too, as JAX's interpreter does). Results not aliased to an
input start uninitialized: NaN for floats, the minimum for integers, False for booleans (JAX's
`uninitialized_value`); operands are padded with it to a multiple of their block shape, so
reads past the end see it and writes there are dropped.

Transformations: `vmap` adds a leading grid axis over the batch, as JAX's (the kernel does not
see it; batched operands and the results get a squeezed leading block dimension); `jvp` is
the JVP of the interpreted loop; reverse mode (`grad`, `vjp`,
`linearize`) raises JAX's "Linearization failed ..." ValueError, as JAX's pallas_call has a
JVP rule but no transpose.

Without `interpret=True` a pallas_call raises JAX's CPU error ("Only interpret mode is
supported on CPU backend."): stagecraft compiles no Mosaic/Triton kernels.

Layer 8 (an experimental API over `lax`, `state` and `pjit`).
"""
from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import threading
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from stagecraft import api, core, dtypes, pjit, tree_util
from stagecraft.core import ShapedArray
from stagecraft.interpreters import ad, batching, mlir, partial_eval as pe
from stagecraft.lax import elementwise as lax_elementwise, shape as lax_shape
from stagecraft.lax import slicing as lax_slicing
from stagecraft.lax.control_flow import while_op
from stagecraft.runtime import client
from stagecraft.source_info_util import fun_source_info
from stagecraft.state import AbstractRef, Ref
from stagecraft.traceback_util import api_boundary

__all__ = [
    "Blocked", "BlockSpec", "BoundedSlice", "Buffered", "CompilerParams", "CostEstimate",
    "Element", "GridSpec", "Indirect", "MemoryRef", "MemorySpace", "NoBlockSpec",
    "KernelRef", "RevisitMode", "Squeezed", "TransformedRef", "cdiv", "force_interpret", "no_block_spec", "num_programs",
    "pallas_call", "pallas_call_p", "program_id", "squeezed", "uninitialized_value",
]


# ---------------------------------------------------------------------------
# block dimensions


@dataclasses.dataclass(frozen=True)
class Element:
  """A block dimension indexed by element: the index map gives the block's first element
  (not its block number). `padding` (low, high) pads the array along that axis with
  uninitialized values first."""
  block_size: int
  padding: tuple[int, int] = (0, 0)

  def __str__(self):
    if self.padding == (0, 0):
      return f"Element({self.block_size})"
    return f"Element({self.block_size}, padding={self.padding})"


@dataclasses.dataclass(frozen=True)
class Squeezed:
  """A block dimension of size 1 that the kernel's ref does not have (`None` in a
  block_shape means the same)."""


squeezed = Squeezed()


@dataclasses.dataclass(frozen=True)
class Blocked:
  """A block dimension of `block_size` elements, indexed by block number (the default for
  an int in a block_shape)."""
  block_size: int

  def __str__(self):
    return f"Blocked({self.block_size})"


@dataclasses.dataclass(frozen=True)
class BoundedSlice:
  """A block dimension given by a `pl.ds` slice from the index map (at most `block_size`
  elements). Not supported by stagecraft's interpreter (nor by JAX's)."""
  block_size: int

  def __repr__(self):
    return f"BoundedSlice({self.block_size})"


@dataclasses.dataclass(frozen=True)
class Indirect:
  """A block dimension indexed by an array of indices (a gather / scatter). Not supported
  by stagecraft's interpreter (nor by JAX's)."""
  block_size: int

  def __repr__(self):
    return f"Indirect({self.block_size})"


BlockDim = Any


def _canonical_dim(dim: Any) -> Any:
  if dim is None:
    return squeezed
  if isinstance(dim, (Squeezed, Blocked, Element, BoundedSlice, Indirect)):
    return dim
  if isinstance(dim, (int, np.integer)) and not isinstance(dim, bool):
    return Blocked(int(dim))
  try:
    return Blocked(int(dim))
  except Exception as e:
    raise ValueError(
        f"Unsupported block dimension type: {type(dim)}. Allowed types: `pl.Squeezed`, "
        f"`pl.Blocked`, `pl.Element`, `int`, `None`.") from e


def _dim_size(dim: Any) -> int:
  return 1 if isinstance(dim, Squeezed) else dim.block_size


# ---------------------------------------------------------------------------
# memory spaces, buffering, cost estimates, compiler params


class RevisitMode(enum.Enum):
  """Whether an output block may be revisited at any grid step (`ANY`) or only at the next
  (`IMMEDIATE`); a pipelining hint, without effect in interpret mode."""
  IMMEDIATE = "immediate"
  ANY = "any"


@dataclasses.dataclass(frozen=True)
class Buffered:
  """How many buffers a pipelined block uses (a hint; no effect in interpret mode)."""
  buffer_count: int
  use_lookahead: bool = False
  revisit: RevisitMode | None = None


@dataclasses.dataclass(frozen=True)
class MemoryRef:
  """The type of a scratch buffer (a `ShapedArray` and a memory space), as made by
  `MemorySpace.X(shape, dtype)`: a `ShapeDtypeStruct` with a memory space."""
  inner_aval: Any
  memory_space: Any

  @property
  def shape(self):
    return self.inner_aval.shape

  @property
  def dtype(self):
    return self.inner_aval.dtype

  def get_array_aval(self) -> ShapedArray:
    return ShapedArray(tuple(self.inner_aval.shape), np.dtype(self.inner_aval.dtype))

  def get_ref_aval(self) -> AbstractRef:
    return AbstractRef(self.get_array_aval(), self.memory_space)


class MemorySpace(enum.Enum):
  """Device-agnostic memory spaces; `MemorySpace.X(shape, dtype)` is a `MemoryRef` (a
  scratch buffer's type). In interpret mode every space is ordinary device memory."""
  ANY = "any"
  DEFAULT = "default"
  ERROR = "error"
  INDEX = "index"
  KEY = "key"
  HOST = "host"

  def from_type(self, type: Any) -> MemoryRef:   # noqa: A002 (JAX's name)
    return MemoryRef(type, memory_space=self)

  def __call__(self, shape: Sequence[int], dtype: Any) -> MemoryRef:
    return self.from_type(ShapedArray(tuple(shape), np.dtype(dtype)))

  def __str__(self) -> str:
    return self.value


@dataclasses.dataclass(frozen=True)
class CostEstimate:
  """A kernel's cost for XLA's scheduler (kept in the equation; unused in interpret mode).

  Raises:
    ValueError: a field that is not an int (JAX's message).
  """
  flops: int
  transcendentals: int
  bytes_accessed: int
  remote_bytes_transferred: int = 0

  def __post_init__(self):
    for k, v in dataclasses.asdict(self).items():
      if not isinstance(v, int):
        raise ValueError(f"All fields in CostEstimate must be ints. {k} is not an int: "
                         f"{type(v)}({v})")

  def to_json(self) -> bytes:
    return (f'{{"flops": {self.flops}, "transcendentals": {self.transcendentals},'
            f' "bytes_accessed": {self.bytes_accessed},'
            f' "remote_bytes_transferred": {self.remote_bytes_transferred}}}').encode("ascii")


class CompilerParams:
  """The base of the backends' compiler parameters (`pltpu.CompilerParams`,
  `plt.CompilerParams`, `plgpu.CompilerParams`): JAX's protocol, with the backend's name in
  `BACKEND`. Interpret mode ignores them."""
  BACKEND: str = ""


# ---------------------------------------------------------------------------
# BlockSpec and GridSpec


class _IndexMapFunc:
  """An index map whose result is always a tuple (JAX wraps `index_map` so)."""

  def __init__(self, index_map: Callable):
    self.index_map = index_map
    functools.update_wrapper(self, index_map)

  def __eq__(self, other):
    if not isinstance(other, _IndexMapFunc):
      return NotImplemented
    return self.index_map == other.index_map

  __hash__ = object.__hash__

  def __call__(self, *args, **kwargs):
    out = self.index_map(*args, **kwargs)
    if isinstance(out, list):
      out = tuple(out)
    if not isinstance(out, tuple):
      out = (out,)
    return out

  def __repr__(self):
    return f"_IndexMapFunc({self.index_map!r})"

  def __str__(self):
    return f"_IndexMapFunc({self.index_map!s})"


@dataclasses.dataclass
class BlockSpec:
  """How an operand or result is cut into blocks, one per kernel invocation.

  Attributes:
    block_shape: one entry per array dimension: an int (a `Blocked` dimension), `None` or
      `pl.squeezed` (size 1, absent from the kernel's ref), `pl.Element(n)` (indexed by
      element), `pl.Blocked(n)`; None: the whole array.
    index_map: `index_map(*program_ids, *scalar_prefetch_refs)` -> a tuple of integer
      scalars, the block's index in each dimension (block number for Blocked, first element
      for Element and squeezed dimensions); None: all zeros.
    memory_space: where the block lives (kept; interpret mode uses device memory).
    pipeline_mode: a `Buffered` hint (kept; unused).
  """
  block_shape: Sequence[Any] | None = None
  index_map: Callable[..., Any] | None = None
  memory_space: Any | None = dataclasses.field(kw_only=True, default=None)
  pipeline_mode: Buffered | None = None

  def __post_init__(self):
    if self.index_map is not None:
      self.index_map = _IndexMapFunc(self.index_map)

  replace = dataclasses.replace


class NoBlockSpec:
  """The default of `in_specs` / `out_specs`: every operand is one whole block."""

  def __repr__(self):
    return "NoBlockSpec"


no_block_spec = NoBlockSpec()


@dataclasses.dataclass(init=False, kw_only=True)
class GridSpec:
  """The grid, block specs and scratch shapes of a `pallas_call`, given together
  (`pallas_call(kernel, out_shape, grid_spec=...)`).

  Args:
    grid: an int, a tuple of ints, or a tuple of `(name, size)` pairs (a named grid).
    in_specs, out_specs: a tuple (or list) of `BlockSpec`s matching the operands
      (results), or `no_block_spec`.
    scratch_shapes: `MemoryRef`s of scratch buffers passed to the kernel after the
      results' refs.

  Raises:
    ValueError: `in_specs` is not a tuple or list; a grid entry is not an int.
  """
  grid: tuple
  grid_names: tuple | None
  in_specs: Any
  out_specs: Any
  scratch_shapes: Any = ()

  def __init__(self, grid: Any = (), in_specs: Any = no_block_spec,
               out_specs: Any = no_block_spec, scratch_shapes: Any = ()):
    if isinstance(in_specs, list):
      in_specs = tuple(in_specs)
    elif in_specs is not no_block_spec and not isinstance(in_specs, Sequence):
      raise ValueError(f"`in_specs` must be a tuple or a list. Found: {in_specs}")
    if isinstance(out_specs, list):
      out_specs = tuple(out_specs)
    self.in_specs = in_specs
    self.out_specs = out_specs
    self.scratch_shapes = tuple(scratch_shapes)
    grid_names = None
    if isinstance(grid, (int, np.integer)):
      grid = (int(grid),)
    elif grid and isinstance(grid[0], tuple):
      grid_names, grid = tuple(n for n, _ in grid), tuple(s for _, s in grid)
    grid = tuple(grid)
    if not all(isinstance(g, (int, np.integer)) or isinstance(g, core.Tracer)
               or hasattr(g, "shape") for g in grid):
      raise ValueError(f"Grid must be a tuple of integers or jax.Array, got {grid}")
    self.grid = grid
    self.grid_names = grid_names


# ---------------------------------------------------------------------------
# the grid environment of the kernel being traced


class _GridEnv(threading.local):
  def __init__(self):
    self.stack: list[tuple[tuple, tuple, tuple | None]] = []


_grid_env = _GridEnv()


@contextlib.contextmanager
def _in_grid(ids: Sequence[Any], sizes: Sequence[Any], names: tuple | None = None):
  _grid_env.stack.append((tuple(ids), tuple(sizes), names))
  try:
    yield
  finally:
    _grid_env.stack.pop()


def _current_grid(fn: str):
  if not _grid_env.stack:
    raise AssertionError(f"pl.{fn} called outside a Pallas kernel (or index map)")
  return _grid_env.stack[-1]


def _axis(axis: Any, names: tuple | None, ids: tuple) -> int:
  if names is not None and not isinstance(axis, int) and axis in names:
    return names.index(axis)
  if not isinstance(axis, (int, np.integer)) or not -len(ids) <= axis < len(ids):
    raise ValueError(f"program_id axis {axis} out of range for a grid of rank {len(ids)}")
  return int(axis)


def program_id(axis: int) -> Any:
  """The position of the running kernel invocation along grid axis `axis`: an int32
  scalar (traced: the interpreted loop's counter).

  Raises:
    AssertionError: outside a kernel or index map (JAX asserts too).
    ValueError: an axis outside the grid.
  """
  ids, _, names = _current_grid("program_id")
  return ids[_axis(axis, names, ids)]


def num_programs(axis: int) -> int | Any:
  """The size of the grid along `axis` (a Python int for a static grid).

  Raises:
    AssertionError: outside a kernel or index map; ValueError: an axis outside the grid.
  """
  ids, sizes, names = _current_grid("num_programs")
  return sizes[_axis(axis, names, ids)]


def cdiv(a: Any, b: Any) -> Any:
  """`ceil(a / b)` for non-negative integers (Python ints give an int, arrays an array)."""
  if isinstance(a, int) and isinstance(b, int):
    return -(-a // b)
  return lax_elementwise.div(a + b - 1, b)


def uninitialized_value(shape: Sequence[int], dtype: Any) -> Any:
  """The value an unwritten output holds in interpret mode (JAX's): NaN for floating
  (and complex) dtypes, the minimum for integers, False for booleans.

  Raises:
    NotImplementedError: another dtype.
  """
  dtype = np.dtype(dtype)
  if dtypes.issubdtype(dtype, np.inexact):
    v = np.nan
  elif dtypes.issubdtype(dtype, np.integer):
    v = np.iinfo(dtype).min
  elif dtype == np.bool_:
    v = False
  else:
    raise NotImplementedError(dtype)
  return lax_shape.full(tuple(shape), v, dtype)


# ---------------------------------------------------------------------------
# kernel refs


class _RefIndexer:
  __slots__ = ("ref",)

  def __init__(self, ref):
    self.ref = ref

  def __getitem__(self, idx):
    return TransformedRef(self.ref, idx)


def _norm_index(idx: Any) -> Any:
  return Ellipsis if isinstance(idx, tuple) and not idx else idx


class KernelRef(Ref):
  """The ref a kernel gets for a block (or a scratch buffer): a stagecraft `Ref` local to
  the kernel's trace, with `ref.at[idx]` views (`TransformedRef`)."""
  __slots__ = ()

  @property
  def at(self) -> _RefIndexer:
    return _RefIndexer(self)

  def __getitem__(self, idx):
    return super().__getitem__(_norm_index(idx))

  def __setitem__(self, idx, value):
    super().__setitem__(_norm_index(idx), value)

  def bitcast(self, dtype):
    raise NotImplementedError("Ref.bitcast inside a Pallas kernel is not supported by "
                              "stagecraft's interpret mode")


class TransformedRef:
  """A view `ref.at[idx]` of a kernel ref: reading gives `ref[idx]`, writing
  `view[j] = v` writes `ref[idx][j]` (JAX's `TransformedRef` of an indexer).

  Attributes:
    ref: the viewed ref (or view); idx: the index.
  """
  __slots__ = ("ref", "idx")

  def __init__(self, ref: Any, idx: Any):
    self.ref = ref
    self.idx = _norm_index(idx)

  def _get(self):
    return self.ref[self.idx]

  @property
  def shape(self) -> tuple:
    return tuple(self._get().shape)

  @property
  def dtype(self):
    return self._get().dtype

  @property
  def ndim(self) -> int:
    return len(self.shape)

  @property
  def at(self) -> _RefIndexer:
    return _RefIndexer(self)

  def __getitem__(self, idx):
    idx = _norm_index(idx)
    v = self._get()
    return v if idx is Ellipsis else v[idx]

  def __setitem__(self, idx, value):
    idx = _norm_index(idx)
    if idx is Ellipsis:
      self.ref[self.idx] = value
      return
    cur = self._get()
    self.ref[self.idx] = cur.at[idx].set(value)

  def __repr__(self):
    return f"TransformedRef({self.ref!r}, {self.idx!r})"


# ---------------------------------------------------------------------------
# the grid mapping: what the interpreter needs, one entry per operand and result


@dataclasses.dataclass(frozen=True, eq=False)
class _Block:
  block_shape: tuple          # canonical BlockDims
  index_map: Callable | None  # None: all zeros
  array_aval: ShapedArray
  origin: str

  @property
  def sizes(self) -> tuple:
    return tuple(_dim_size(d) for d in self.block_shape)

  @property
  def squeezed(self) -> tuple:
    return tuple(isinstance(d, Squeezed) for d in self.block_shape)

  @property
  def ref_shape(self) -> tuple:
    return tuple(_dim_size(d) for d in self.block_shape if not isinstance(d, Squeezed))

  def __repr__(self):
    return f"BlockMapping(block_shape={self.block_shape})"


@dataclasses.dataclass(frozen=True, eq=False)
class GridMapping:
  """The canonical grid and block mappings of a pallas_call equation (printed as JAX
  prints its `GridMapping`)."""
  grid: tuple
  grid_names: tuple | None
  block_mappings: tuple
  num_index_operands: int
  num_inputs: int
  num_outputs: int
  scratch_avals: tuple
  scalar_avals: tuple = ()
  vmapped_dims: tuple = ()   # grid axes added by vmap: not program ids of the kernel

  def __repr__(self):
    return f"GridMapping(grid={self.grid}, block_mappings={self.block_mappings})"

  __str__ = __repr__


def _origins(tree_paths: Sequence[Any], prefix: str) -> list[str]:
  return [f"{prefix}{tree_util.keystr(p)}" for p in tree_paths]


def _flat_specs(specs: Any, tree: Any, n: int, what: str, of: str) -> list:
  """One BlockSpec per operand (of `tree`): `specs` flattened (None entries kept), or the
  whole-array spec for each when none is given.

  Raises:
    ValueError: `specs` does not have `tree`'s structure (JAX's words).
  """
  if specs is no_block_spec:
    return [no_block_spec] * n
  flat, specs_tree = tree_util.tree_flatten(specs, is_leaf=lambda s: s is None)
  if specs_tree != tree:
    raise ValueError(_mismatch(what, specs_tree, of, tree))
  return flat


def _mismatch(what1: str, tree1: Any, what2: str, tree2: Any) -> str:
  """JAX's message for two pytree structures that differ (in_specs vs inputs)."""
  errs = list(tree_util.equality_errors_pytreedef(tree1, tree2))
  lines = [f"Pytree for {what1} and {what2} do not match. There are {len(errs)} "
           f"mismatches, including:"]
  for path, thing1, thing2, explanation in errs:
    where = f"at {tree_util.keystr(path)}, " if path else ""
    lines.append(f"    * {where}{what1} is a {thing1} but {what2} is a {thing2}, so "
                 f"{explanation}")
  return "\n".join(lines)


def _block_of(spec: Any, aval: ShapedArray, origin: str) -> _Block:
  if spec is no_block_spec or spec is None:
    spec = BlockSpec()
  if not isinstance(spec, BlockSpec):
    raise TypeError(f"Expected a pl.BlockSpec for {origin}, got {spec!r}")
  if spec.block_shape is None:
    block_shape = tuple(_canonical_dim(d) for d in aval.shape)
  else:
    block_shape = tuple(_canonical_dim(d) for d in spec.block_shape)
    if len(block_shape) != len(aval.shape):
      raise ValueError(f"Block shape for {origin} (= {block_shape}) must have the same "
                       f"number of dimensions as the array shape {aval.shape}.")
  for d in block_shape:
    if isinstance(d, (BoundedSlice, Indirect)):
      raise NotImplementedError(
          f"pl.{type(d).__name__} block dimensions ({origin}) are not supported in "
          f"interpret mode")
  return _Block(block_shape, spec.index_map, aval, origin)


def _start_indices(block: _Block, ids: Sequence[Any], scalar_refs: Sequence[Any]) -> list:
  """The first element of the block at grid point `ids` in each array dimension (int32);
  checks the index map's results as JAX does."""
  ndim = len(block.block_shape)
  if block.index_map is None:
    return [np.int32(0)] * ndim
  fn = block.index_map
  out = fn(*ids, *scalar_refs)
  leaves = tree_util.tree_leaves(out)
  where = fun_source_info(getattr(fn, "index_map", fn))
  if len(leaves) != ndim:
    raise ValueError(
        f"Index map function {where} for {block.origin} must return {ndim} values to match "
        f"block_shape={block.block_shape}. Currently returning {len(leaves)} values:")
  starts = []
  for i, (v, d) in enumerate(zip(leaves, block.block_shape)):
    aval = core.get_aval(v)
    if aval.shape or np.dtype(aval.dtype) not in (np.dtype(np.int32), np.dtype(np.int64)):
      raise ValueError(
          f"Index map function {where} for {block.origin} must return integer scalars. "
          f"Output[{i}] has type {aval}.")
    v = lax_elementwise.convert_element_type(v, np.int32)
    starts.append(v * d.block_size if isinstance(d, Blocked) else v)
  return starts


def _read_block(x: Any, starts: Sequence[Any], block: _Block) -> Any:
  out = lax_slicing.dynamic_slice(x, starts, block.sizes)
  sq = tuple(i for i, s in enumerate(block.squeezed) if s)
  return lax_shape.squeeze(out, sq) if sq else out


def _write_block(x: Any, starts: Sequence[Any], block: _Block, value: Any) -> Any:
  dims = tuple(i for i, s in enumerate(block.squeezed) if not s)
  value = lax_shape.broadcast_in_dim(value, block.sizes, dims)
  return lax_slicing.dynamic_update_slice(x, value, starts)


def _pad_to_blocks(x: Any, block: _Block) -> Any:
  padding = [d.padding if isinstance(d, Element) else (0, 0) for d in block.block_shape]
  shape = [lo + s + hi for s, (lo, hi) in zip(x.shape, padding)]
  padded = [((s - 1) // b + 1) * b if s else s for s, b in zip(shape, block.sizes)]
  config = [(lo, hi + p - s, 0) for (lo, hi), s, p in zip(padding, shape, padded)]
  if any(c != (0, 0, 0) for c in config):
    x = lax_shape.pad(x, uninitialized_value((), x.dtype), config)
  return x


def _unpad(x: Any, block: _Block) -> Any:
  lows = [d.padding[0] if isinstance(d, Element) else 0 for d in block.block_shape]
  shape = block.array_aval.shape
  if tuple(x.shape) != tuple(shape) or any(lows):
    x = lax_shape.slice(x, lows, [lo + s for lo, s in zip(lows, shape)])
  return x


def _strong(x: Any) -> Any:
  if core.get_aval(x).weak_type:
    return lax_elementwise.convert_element_type(x, x.dtype)
  return x


def _interpret(*args: Any, kernel: core.ClosedJaxpr, grid_mapping: GridMapping,
               input_output_aliases: tuple, **_) -> list:
  """JAX's interpret mode: the grid as a while loop around the kernel's function."""
  gm = grid_mapping
  n_idx = gm.num_index_operands
  scalars, ins = list(args[:n_idx]), list(args[n_idx:])
  aliases = dict((o, i) for i, o in input_output_aliases)
  blocks = gm.block_mappings
  outs = [ins[aliases[k]] if k in aliases
          else uninitialized_value(b.array_aval.shape, b.array_aval.dtype)
          for k, b in enumerate(blocks[gm.num_inputs:])]
  arrays = [_pad_to_blocks(x, b) for x, b in zip([*ins, *outs], blocks)]
  scratch = [uninitialized_value(a.shape, a.dtype) for a in gm.scratch_avals]
  grid = gm.grid
  n_iter = int(np.prod(grid, dtype=np.int64)) if grid else 1

  def next_ids(ids):
    out, carry = [], True
    for size, i in reversed(list(zip(grid, ids))):
      j = lax_elementwise.select(carry, i + 1, i) if not isinstance(carry, bool) else i + 1
      carry = lax_elementwise.eq(j, np.int32(size))
      out.append(lax_elementwise.select(carry, np.int32(0), j))
    return tuple(reversed(out))

  kernel_axes = [d for d in range(len(grid)) if d not in gm.vmapped_dims]
  kernel_grid = tuple(grid[d] for d in kernel_axes)

  def body(carry):
    i, ids, arrs, scr = carry
    kernel_ids = [ids[d] for d in kernel_axes]
    scalar_refs = [KernelRef(s, core.current_trace()) for s in scalars]
    with _in_grid(kernel_ids, kernel_grid, gm.grid_names):
      starts = [_start_indices(b, ids, scalar_refs) for b in blocks]
    vals = [_read_block(x, s, b) for x, s, b in zip(arrs, starts, blocks)]
    res = core.eval_jaxpr(kernel.jaxpr, kernel.consts, *kernel_ids, *scalars, *vals, *scr)
    res = res[n_idx:]
    new_vals, new_scr = res[:len(vals)], res[len(vals):]
    arrs = [_write_block(x, s, b, v) for x, s, b, v in zip(arrs, starts, blocks, new_vals)]
    return i + np.int32(1), next_ids(ids), arrs, list(new_scr)

  init = (np.int32(0), tuple(np.int32(0) for _ in grid), arrays, scratch)
  _, _, arrays, _ = while_op.while_loop(lambda c: c[0] < np.int32(n_iter), body, init)
  return [_unpad(x, b) for x, b in zip(arrays[len(ins):], blocks[gm.num_inputs:])]


# ---------------------------------------------------------------------------
# the primitive


pallas_call_p = core.Primitive("pallas_call")
pallas_call_p.multiple_results = True


def _abstract_eval(*avals, out_avals, kernel, **_):
  return list(out_avals), kernel.jaxpr.effects


pallas_call_p.def_effectful_abstract_eval(_abstract_eval)
mlir.register_lowering(pallas_call_p, mlir.lower_fun(_interpret, multiple_results=True))

_LINEARIZE_ERROR = ("Linearization failed to produce known values for all output primals. "
                    "This is typically caused by attempting to differentiate a function uses "
                    "an operation that does not support reverse-mode autodiff.")


def _jvp(primals, tangents, **params):
  if ad.jvp_mode() is not None:   # grad / vjp / linearize: no transpose rule, as JAX's
    raise ValueError(_LINEARIZE_ERROR)
  tangents = [ad.instantiate_zeros(t) for t in tangents]
  out, t_out = api.jvp(lambda *xs: _interpret(*xs, **params), list(primals), tangents)
  return list(out), list(t_out)


class _BatchedIndexMap:
  """The index map of an operand of a vmapped pallas_call: the new leading grid axis
  selects the operand's batch (a squeezed leading block dimension) when `batched`, and is
  ignored otherwise; the other program ids go to `index_map` (None: all zeros)."""

  def __init__(self, index_map: Callable | None, ndim: int, batched: bool):
    self.index_map, self.ndim, self.batched = index_map, ndim, batched

  def __call__(self, b, *rest):   # rest: the other program ids, then the scalar refs
    if self.index_map is None:
      out = (np.int32(0),) * self.ndim
    else:
      out = tuple(tree_util.tree_leaves(self.index_map(*rest)))
    return (b, *out) if self.batched else out


def _batch(args, dims, **params):
  """vmap of a pallas_call, as JAX's: one more (leading) grid axis over the batch, each
  batched operand and every result getting a squeezed leading block dimension it selects;
  the kernel does not see that axis. (Batched scalar-prefetch operands: the interpreted
  loop is vmapped instead.)"""
  gm: GridMapping = params["grid_mapping"]
  n_idx = gm.num_index_operands
  batched = [d is not batching.not_mapped for d in dims]
  if any(batched[:n_idx]):
    in_axes = [None if d is batching.not_mapped else int(d) for d in dims]
    out = api.vmap(lambda *xs: _interpret(*xs, **params), in_axes=in_axes)(*args)
    return list(out), [0] * len(out)
  size = next(x.shape[d] for x, d in zip(args, dims) if d is not batching.not_mapped)
  args = [batching.moveaxis(x, d, 0) if b else x for x, d, b in zip(args, dims, batched)]
  # an unbatched input aliased to a (batched) output is broadcast along the batch
  for i, _ in params["input_output_aliases"]:
    k = n_idx + i
    if not batched[k]:
      x = args[k]
      args[k] = lax_shape.broadcast_in_dim(x, (size, *x.shape), tuple(np.arange(1, x.ndim + 1)))
      batched[k] = True
  blocks = []
  for blk, b in zip(gm.block_mappings, [*batched[n_idx:], *[True] * gm.num_outputs]):
    fn = _BatchedIndexMap(blk.index_map, len(blk.block_shape), b)
    if b:
      aval = blk.array_aval.update(shape=(size, *blk.array_aval.shape))
      blocks.append(_Block((squeezed, *blk.block_shape), fn, aval, blk.origin))
    else:
      blocks.append(_Block(blk.block_shape, fn, blk.array_aval, blk.origin))
  new_gm = dataclasses.replace(
      gm, grid=(size, *gm.grid), block_mappings=tuple(blocks),
      vmapped_dims=(0, *(d + 1 for d in gm.vmapped_dims)))
  out_avals = tuple(a.update(shape=(size, *a.shape)) for a in params["out_avals"])
  out = pallas_call_p.bind(*args, **{**params, "grid_mapping": new_gm,
                                     "out_avals": out_avals})
  return list(out), [0] * len(out)


ad.primitive_jvps[pallas_call_p] = _jvp
batching.primitive_batchers[pallas_call_p] = _batch


def _pp_params(eqn, context):
  p = eqn.params
  return [("compiler_params", p["compiler_params"]), ("cost_estimate", p["cost_estimate"]),
          ("debug", p["debug"]), ("grid_mapping", p["grid_mapping"]),
          ("input_output_aliases", p["input_output_aliases"]),
          ("interpret", p["interpret"]), ("jaxpr", p["kernel"].jaxpr),
          ("mesh", None), ("metadata", p["metadata"]), ("name", p["name"]),
          ("out_avals", tuple(p["out_avals"]))]


core.pp_eqn_rules[pallas_call_p] = _pp_params


# ---------------------------------------------------------------------------
# pallas_call


_forced = {"params": None}


def force_interpret(params: Any) -> Any:
  """Makes every later pallas_call run in interpret mode with `params` (None: as each
  call says); returns the previous setting (`pltpu.force_tpu_interpret_mode`)."""
  old, _forced["params"] = _forced["params"], params
  return old


def _kernel_jaxpr(kernel: Callable, gm: GridMapping, trees: tuple, name: str | None):
  """The kernel traced on refs of its blocks: a closed jaxpr from (program ids, scalar
  prefetch values, block values, scratch values) to the final values of all its refs."""
  blocks = gm.block_mappings
  ref_avals = ([ShapedArray(b.ref_shape, b.array_aval.dtype) for b in blocks]
               + list(gm.scratch_avals))
  n_ids = len(gm.grid)
  store = {}

  def flat(*xs):
    trace = core.current_trace()
    ids, vals = xs[:n_ids], xs[n_ids:]
    refs = [KernelRef(v, trace) for v in vals]
    scalar_tree, in_tree, out_tree, scratch_tree = trees
    n_idx, n_in = gm.num_index_operands, gm.num_inputs
    n_fixed = len(refs) - len(gm.scratch_avals)
    scalars = tree_util.tree_unflatten(scalar_tree, refs[:n_idx])
    ins = tree_util.tree_unflatten(in_tree, refs[n_idx:n_idx + n_in])
    outs = tree_util.tree_unflatten(out_tree, refs[n_idx + n_in:n_fixed])
    if not isinstance(outs, (tuple, list)):
      outs = (outs,)
    fixed = [*scalars, *ins, *outs]
    scratch = tree_util.tree_unflatten(scratch_tree, refs[n_fixed:])
    with _in_grid(ids, gm.grid, gm.grid_names):
      if isinstance(scratch, dict):
        out = kernel(*fixed, **scratch)
      else:
        out = kernel(*fixed, *scratch)
    store["out"] = out
    return [_strong(r._value) for r in refs]

  idx_avals = [ShapedArray((), np.dtype(np.int32))] * n_ids
  jaxpr, consts = pe.trace_to_jaxpr(flat, [*idx_avals, *gm.scalar_avals, *ref_avals])
  where = fun_source_info(kernel)
  if name is not None:
    where = f"{name} for kernel function {where}"
  captured = [core.get_aval(c) for c in consts if not isinstance(c, Ref)]
  if captured:
    shown = ", ".join(a.str_short() for a in captured)
    raise ValueError(f"The kernel function in the pallas_call {where} captures constants "
                     f"[{shown}]. You should pass them as inputs.")
  if store["out"] is not None:
    raise ValueError(f"The kernel function in the pallas_call {where} should return None. "
                     f"It returns a PyTree: {tree_util.tree_structure(store['out'])}")
  return core.ClosedJaxpr(jaxpr, consts)


def _flat_out_avals(out_shape: Any) -> tuple[list, Any, list]:
  if isinstance(out_shape, list):
    out_shape = tuple(out_shape)
  with_paths, out_tree = tree_util.tree_flatten_with_path(out_shape)
  paths = [p for p, _ in with_paths]
  avals = []
  for _, s in with_paths:
    if isinstance(s, MemoryRef):
      avals.append(s.get_array_aval())
    else:
      avals.append(ShapedArray(tuple(s.shape), np.dtype(s.dtype)))
  return avals, out_tree, paths


@api_boundary
def pallas_call(kernel: Callable[..., None], out_shape: Any, *,
                grid_spec: GridSpec | None = None, grid: Any = (),
                in_specs: Any = no_block_spec, out_specs: Any = no_block_spec,
                scratch_shapes: Any = (), input_output_aliases: Mapping[int, int] = {},
                debug: bool = False, interpret: Any = False, name: str | None = None,
                compiler_params: Any = None, cost_estimate: CostEstimate | None = None,
                metadata: dict[str, str] | None = None) -> Callable[..., Any]:
  """A function running `kernel` over a grid (JAX's `pl.pallas_call`), in interpret mode.

  Args:
    kernel: `kernel(*in_refs, *out_refs, *scratch_refs)` (scratch refs as keywords when
      `scratch_shapes` is a dict): reads its input blocks through the refs and writes its
      output blocks; returns None.
    out_shape: a pytree of `ShapeDtypeStruct`s (anything with `shape` and `dtype`): the
      results.
    grid_spec: grid, in_specs, out_specs and scratch_shapes together (then those must be
      left at their defaults); a `pltpu.PrefetchScalarGridSpec` adds scalar prefetch
      operands (the first `num_scalar_prefetch` arguments, passed whole to every index map
      and to the kernel as refs).
    grid: an int or a tuple of ints: the kernel runs once per point, in row-major order.
    in_specs, out_specs: `BlockSpec`s matching the arguments (results) as a pytree.
    scratch_shapes: `MemoryRef`s (`pltpu.VMEM((8,), jnp.float32)`): buffers kept across
      the grid, uninitialized at the start.
    input_output_aliases: `{input index: output index}` (flat indices): the output starts
      with that input's value.
    debug: print the kernel's (discharged) jaxpr when it is traced.
    interpret: must be true (or a `pltpu.InterpretParams`) on stagecraft.
    name, compiler_params, cost_estimate, metadata: kept in the equation.

  Returns:
    `f(*args)`: the results, a pytree like `out_shape`.

  Raises (when `f` is called):
    ValueError: "Only interpret mode is supported on CPU backend." without `interpret`
      on CPU (NotImplementedError on another backend: stagecraft compiles no kernels);
      JAX's messages for specs whose pytree or rank do not match, index maps returning the
      wrong number or type of values, aliases out of range or of another type, kernels
      capturing array constants or returning a value.
    TypeError: a kernel whose arity does not match.

  Source: JAX's `jax._src.pallas.pallas_call` and `hlo_interpreter` (the interpreted
  semantics); stagecraft's implementation of them.
  """
  if grid_spec is None:
    flat_scratch, scratch_tree = tree_util.tree_flatten(scratch_shapes)
    grid_spec = GridSpec(grid, in_specs, out_specs, flat_scratch)
  else:
    if grid:
      raise ValueError(f"If `grid_spec` is specified, then `grid` must be `()`. It is {grid}")
    if in_specs is not no_block_spec:
      raise ValueError("If `grid_spec` is specified, then `in_specs` must be "
                       f"`no_block_spec`. It is {in_specs}")
    if out_specs is not no_block_spec:
      raise ValueError("If `grid_spec` is specified, then `out_specs` must be "
                       f"`no_block_spec`. It is {out_specs}")
    if scratch_shapes:
      raise ValueError("If `grid_spec` is specified, then `scratch_shapes` must be `()`. "
                       f"It is {scratch_shapes}")
    flat_scratch, scratch_tree = tree_util.tree_flatten(grid_spec.scratch_shapes)
  out_avals, out_tree, out_paths = _flat_out_avals(out_shape)

  @api_boundary
  def wrapped(*args):
    mode = _forced["params"] or interpret
    if not mode:
      backend = client.default_backend()
      if backend == "cpu":
        raise ValueError("Only interpret mode is supported on CPU backend.")
      raise NotImplementedError(
          f"stagecraft does not compile Pallas kernels (Mosaic/Triton) for {backend}: "
          f"pass interpret=True to pallas_call to run the kernel with its interpreter.")
    with_paths, in_tree = tree_util.tree_flatten_with_path(args)
    in_paths = [p for p, _ in with_paths]
    flat_args = [x for _, x in with_paths]
    in_avals = [core.get_aval(x) for x in flat_args]
    in_avals = [a.update(weak_type=False) if isinstance(a, ShapedArray) else a
                for a in in_avals]
    n_idx = getattr(grid_spec, "num_scalar_prefetch", 0)
    all_args = tree_util.tree_unflatten(in_tree, in_avals)
    scalar_leaves, scalar_tree = tree_util.tree_flatten(tuple(all_args[:n_idx]))
    n_flat_idx = len(scalar_leaves)
    _, in_tree_rest = tree_util.tree_flatten(tuple(all_args[n_idx:]))
    block_in_avals = in_avals[n_flat_idx:]
    in_origins = _origins(in_paths, "args")[n_flat_idx:]
    out_origins = _origins(out_paths, "outputs")
    flat_in_specs = _flat_specs(grid_spec.in_specs, in_tree_rest, len(block_in_avals),
                                "`in_specs`", "`inputs`")
    flat_out_specs = _flat_specs(grid_spec.out_specs, out_tree, len(out_avals),
                                 "`out_specs`", "`out_shape`")
    blocks = tuple([_block_of(s, a, o) for s, a, o in
                    zip(flat_in_specs, block_in_avals, in_origins)]
                   + [_block_of(s, a, o) for s, a, o in
                      zip(flat_out_specs, out_avals, out_origins)])
    for g in grid_spec.grid:
      if not isinstance(g, (int, np.integer)):
        raise NotImplementedError("pallas_call with a dynamic grid (array grid sizes) is "
                                  "not supported by stagecraft")
    scratch_avals = tuple(s.get_array_aval() if hasattr(s, "get_array_aval")
                          else ShapedArray(tuple(s.shape), np.dtype(s.dtype))
                          for s in flat_scratch)
    gm = GridMapping(tuple(int(g) for g in grid_spec.grid), grid_spec.grid_names, blocks,
                     n_flat_idx, len(block_in_avals), len(out_avals), scratch_avals,
                     tuple(in_avals[:n_flat_idx]))
    # check the index maps (JAX traces them before the kernel)
    _check_index_maps(gm)
    kernel_jaxpr = _kernel_jaxpr(kernel, gm, (scalar_tree, in_tree_rest, out_tree, scratch_tree), name)
    for i_idx, o_idx in input_output_aliases.items():
      if i_idx not in range(len(in_avals)):
        raise ValueError(f"input_output_aliases contains the mapping '{i_idx}:{o_idx}' with "
                         f"input index {i_idx} outside the range [0, {len(in_avals)})")
      if o_idx not in range(len(out_avals)):
        raise ValueError(f"input_output_aliases contains the mapping '{i_idx}:{o_idx}' with "
                         f"output index {o_idx} outside the range [0, {len(out_avals)})")
      ia, oa = in_avals[i_idx], out_avals[o_idx]
      if ia.shape != oa.shape or ia.dtype != oa.dtype:
        raise ValueError(
            f"input_output_aliases contains the mapping '{i_idx}:{o_idx}' referring to "
            f"input{tree_util.keystr(in_paths[i_idx])} with abstract value {ia} and to "
            f"output{tree_util.keystr(out_paths[o_idx])} with a different abstract value "
            f"{oa}.")
    if debug:
      print(f"\nJaxpr of the kernel in pallas_call {fun_source_info(kernel)}:")
      print(_debug_jaxpr(kernel_jaxpr.jaxpr, len(gm.grid)))
    # aliases index the operands after the scalar prefetch ones
    aliases = tuple((i - n_flat_idx, o) for i, o in input_output_aliases.items())
    outs = pallas_call_p.bind(
        *flat_args, out_avals=tuple(out_avals), kernel=kernel_jaxpr, debug=debug,
        interpret=mode, grid_mapping=gm, input_output_aliases=aliases,
        compiler_params=compiler_params, cost_estimate=cost_estimate,
        metadata=None if metadata is None else tuple(sorted(metadata.items())), name=name)
    return tree_util.tree_unflatten(out_tree, outs)
  # NB: as JAX's, the call is a jit(inline=True) of itself: eager calls of one pallas_call
  # function are traced and compiled once per input types; traced, it inlines
  return pjit.jit(wrapped, inline=True)


def _debug_jaxpr(jaxpr: core.Jaxpr, n_ids: int) -> core.Jaxpr:
  """The kernel's jaxpr as `debug=True` prints it: without the program-id inputs when the
  kernel does not read them (JAX's jaxpr has no such inputs: it reads them with
  `program_id` equations)."""
  ids = set(jaxpr.invars[:n_ids])
  used = any(v in ids for e in jaxpr.eqns for v in e.invars if isinstance(v, core.Var))
  used = used or any(v in ids for v in jaxpr.outvars if isinstance(v, core.Var))
  return jaxpr if used else jaxpr.replace(invars=jaxpr.invars[n_ids:])


def _check_index_maps(gm: GridMapping) -> None:
  """Traces every index map on abstract program ids (JAX's checks and messages)."""
  n = len(gm.grid)
  for b in gm.block_mappings:
    if b.index_map is None:
      continue

    def flat(*xs, b=b):
      ids, scalars = xs[:n], xs[n:]
      trace = core.current_trace()
      refs = [KernelRef(s, trace) for s in scalars]
      with _in_grid(ids, gm.grid, gm.grid_names):
        return _start_indices(b, ids, refs)

    _, consts = pe.trace_to_jaxpr(flat, [ShapedArray((), np.dtype(np.int32))] * n
                                  + list(gm.scalar_avals))
    if consts:
      fn = b.index_map
      where = fun_source_info(getattr(fn, "index_map", fn))
      raise ValueError(f"Index map function {where} for {b.origin} must not capture "
                       f"constants: {list(consts)}")
