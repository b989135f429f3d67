"""`torch.nn.attention.flex_attention`: attention whose scores a Python function edits
(`score_mod(score, b, h, q_idx, kv_idx)`) and whose mask a Python function draws
(`mask_mod(b, h, q_idx, kv_idx)`, gathered into a block-sparse `BlockMask`).

PyTorch vmaps the two functions over scalar indices and compiles them into one fused kernel.
Here they are called once on broadcasting index tensors (b of shape B x 1 x 1 x 1, h of
1 x H x 1 x 1, and so on), which gives the same values for the elementwise functions vmap
allows, and the scores are materialized as in PyTorch's own eager reference. The result is
ordinary tensor ops: gradients reach the query, key, value and any tensor the functions
capture, and a traced step compiles them like the rest of the model."""

from __future__ import annotations

import functools
import inspect
import itertools
import math
import operator
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple, TypedDict

import numpy as np

import tracegrad as _tg
from tracegrad.frontend.tensor import Tensor
from tracegrad.torch._support import not_provided as _not_provided

__all__ = [
    "AuxOutput", "AuxRequest", "BlockMask", "FlexKernelOptions", "and_masks", "create_block_mask",
    "create_mask", "flex_attention", "noop_mask", "or_masks",
]  # fmt: skip

_score_mod_signature = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], Tensor]
_mask_mod_signature = Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]
_DEFAULT_SPARSE_BLOCK_SIZE = 128
_LARGE_SPARSE_BLOCK_SIZE = 1 << 30
_FLEX_ATTENTION_DISABLE_COMPILE_DEBUG = False  # read by code that debugs its mods; no effect


class FlexKernelOptions(TypedDict, total=False):
    """Triton tuning knobs (block sizes, stages, backend): accepted and unused on the CPU."""


class AuxRequest(NamedTuple):
    lse: bool = False
    max_scores: bool = False


class AuxOutput(NamedTuple):
    lse: Tensor | None = None
    max_scores: Tensor | None = None


def noop_mask(batch: Tensor, head: Tensor, token_q: Tensor, token_kv: Tensor) -> Tensor:
    """Every query sees every key."""
    return batch.new_ones((), dtype=_tg.bool)


def _identity(score: Tensor, batch: Tensor, head: Tensor, q: Tensor, kv: Tensor) -> Tensor:
    return score


def _sliced_mask_mod_error(batch: Tensor, head: Tensor, q: Tensor, kv: Tensor) -> Tensor:
    raise RuntimeError(
        "Cannot use mask_mod from a sliced BlockMask: set the original BlockMask's mask_mod"
    )


def _combined(mask_mods: tuple, join: Callable, start: bool) -> Callable:
    if not all(callable(m) for m in mask_mods):
        raise RuntimeError(f"All inputs should be callable mask_mods: {mask_mods}")

    def mask_mod(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        masks = (m(b, h, q_idx, kv_idx) for m in mask_mods)
        return functools.reduce(join, masks, b.new_full((), start, dtype=_tg.bool))

    mask_mod.__name__ = f"{join.__name__.rstrip('_')}_mask"  # PyTorch's: "and_mask", "or_mask"
    return mask_mod


def or_masks(*mask_mods: Callable) -> Callable:
    """The union of the masks."""
    return _combined(mask_mods, operator.or_, False)


def and_masks(*mask_mods: Callable) -> Callable:
    """The intersection of the masks."""
    return _combined(mask_mods, operator.and_, True)


def _positional_count(fn: Callable) -> int:
    """How many arguments `fn` needs: 5 for a score_mod, 4 for a mask_mod (PyTorch's rule)."""
    code = getattr(fn, "__code__", None)
    if code is not None:
        count = code.co_argcount - len(getattr(fn, "__defaults__", None) or ())
    else:
        params = inspect.signature(fn).parameters.values()
        count = sum(1 for p in params if p.default is inspect.Parameter.empty)
    if count not in (4, 5):
        raise AssertionError(f"Expected 4 or 5 positional args, got {count}")
    return count


def _index_grid(B: int, H: int, Q: int, KV: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """b, h, q_idx, kv_idx as int32 tensors that broadcast to B x H x Q x KV."""
    shapes = ((B, 1, 1, 1), (1, H, 1, 1), (1, 1, Q, 1), (1, 1, 1, KV))
    return tuple(_tg.arange(s[i], dtype=_tg.int32).view(s) for i, s in enumerate(shapes))


def _run_mod(mod: Callable, grid: tuple[Tensor, ...], *score: Tensor) -> Tensor:
    """`mod(*score, b, h, q_idx, kv_idx)` with indexing as under PyTorch's vmap over scalars."""
    plain = Tensor.__getitem__
    sizes = tuple(g.shape[i] for i, g in enumerate(grid))

    def per_point(index: Any) -> bool:  # b, h, q_idx, kv_idx or an integer tensor made of them
        return (isinstance(index, Tensor) and index.dim() == 4 and not index.is_floating_point()
                and index.dtype != _tg.bool
                and all(n in (1, g) for n, g in zip(index.shape, sizes, strict=True)))  # fmt: skip

    def getitem(t: Tensor, index: Any) -> Tensor:
        """A tensor indexed per grid point holds its values grid first (4 leading dims), so
        that the next index, in a chain like transformers' `mask[b][0][q_idx][kv_idx]`, takes
        the dim after them, as it would on the scalar-indexed tensor vmap sees."""
        parts = index if isinstance(index, tuple) else (index,)
        if not (t.__dict__.get("_grid_first") or any(per_point(i) for i in parts)):
            return plain(t, index)
        if not t.__dict__.get("_grid_first"):
            t = t.reshape((1, 1, 1, 1, *t.shape))
        align = tuple(_tg.arange(n).view([n if d == i else 1 for d in range(4)])
                      for i, n in enumerate(t.shape[:4]))  # fmt: skip
        out = plain(t, align + parts)  # advanced indices first: the grid leads, as NumPy places
        out._grid_first = True
        return out

    Tensor.__getitem__ = getitem
    try:
        return mod(*score, *grid)
    finally:
        Tensor.__getitem__ = plain


def create_mask(
    mod_fn: Callable, B: int | None, H: int | None, Q_LEN: int, KV_LEN: int, device: Any = None
) -> Tensor:
    """The boolean B x H x Q_LEN x KV_LEN mask `mod_fn` draws (a score_mod masks where it
    gives -inf)."""
    B, H = B or 1, H or 1
    grid = _index_grid(B, H, Q_LEN, KV_LEN)
    if _positional_count(mod_fn) == 5:
        mask = ~_tg.isneginf(_run_mod(mod_fn, grid, _tg.zeros(B, H, Q_LEN, KV_LEN)))
    else:
        mask = _tg.as_tensor(_run_mod(mod_fn, grid)).to(_tg.bool)
    return mask.expand(B, H, Q_LEN, KV_LEN).contiguous()


def _block_counts(mask: Tensor, q_block: int, kv_block: int) -> Tensor:
    """How many allowed elements each q_block x kv_block tile of `mask` holds."""
    *lead, q, kv = mask.shape
    pad_q, pad_kv = -q % q_block, -kv % kv_block
    mask = _tg.nn.functional.pad(mask, (0, pad_kv, 0, pad_q)).to(_tg.int32)
    tiles = mask.view(*lead, (q + pad_q) // q_block, q_block, (kv + pad_kv) // kv_block, kv_block)
    return tiles.sum(dim=(-3, -1))


def _dense_to_ordered(dense: Tensor) -> tuple[Tensor, Tensor]:
    """Each row's number of set blocks, and its columns with the set ones first."""
    dense = dense.to(_tg.int32)
    order = _tg.argsort(dense, dim=-1, descending=True, stable=True)
    return dense.sum(dim=-1).to(_tg.int32), order.to(_tg.int32)


def _ordered_to_dense(num_blocks: Tensor, indices: Tensor, num_cols: int) -> Tensor:
    """The 0/1 block matrix whose row i has columns indices[i, :num_blocks[i]] set."""
    listed = _tg.arange(indices.shape[-1]) < num_blocks[..., None]
    hits = (indices[..., None] == _tg.arange(num_cols)) & listed[..., None]
    return hits.any(dim=-2).to(_tg.int32)


def _transpose_ordered(num_blocks: Tensor, indices: Tensor) -> tuple[Tensor, Tensor]:
    dense = _ordered_to_dense(num_blocks, indices, indices.shape[-1])
    return _dense_to_ordered(dense.transpose(-2, -1))


_SHADES = (" ", "░", "█")  # no tile computed, some, all


def _check_layout(kv_indices: Tensor, full_num: Tensor | None, full_indices: Tensor | None) -> None:
    if kv_indices.dim() < 2:
        raise RuntimeError("BlockMask must have at least 2 dimensions")
    if (full_num is None) != (full_indices is None):
        raise AssertionError(
            "full_kv_num_blocks and full_kv_indices must be both provided or omitted"
        )


class BlockMask:
    """Which q_block x kv_block tiles of the scores are computed: rows of `kv_num_blocks`
    partial tiles listed in `kv_indices` (mask_mod decides inside them) and, optionally,
    `full_kv_*` tiles taken whole. The q_* tensors are the transposes PyTorch's backward
    kernel walks; they are kept for code that reads them."""

    def __init__(
        self,
        seq_lengths: tuple[int, int],
        kv_num_blocks: Tensor,
        kv_indices: Tensor,
        full_kv_num_blocks: Tensor | None,
        full_kv_indices: Tensor | None,
        q_num_blocks: Tensor | None,
        q_indices: Tensor | None,
        full_q_num_blocks: Tensor | None,
        full_q_indices: Tensor | None,
        BLOCK_SIZE: tuple[int, int] = (_DEFAULT_SPARSE_BLOCK_SIZE, _DEFAULT_SPARSE_BLOCK_SIZE),
        mask_mod: Callable = noop_mask,
        **deterministic_dq: Any,
    ) -> None:
        _check_layout(kv_indices, full_kv_num_blocks, full_kv_indices)
        self.seq_lengths = tuple(seq_lengths)
        self.kv_num_blocks, self.kv_indices = kv_num_blocks, kv_indices
        self.full_kv_num_blocks, self.full_kv_indices = full_kv_num_blocks, full_kv_indices
        self.q_num_blocks, self.q_indices = q_num_blocks, q_indices
        self.full_q_num_blocks, self.full_q_indices = full_q_num_blocks, full_q_indices
        self.BLOCK_SIZE = tuple(BLOCK_SIZE)
        self.mask_mod = mask_mod
        for name in ("dq_write_order", "dq_write_order_full", "dq_kv_order", "dq_kv_order_spt"):
            setattr(self, name, deterministic_dq.get(name))

    @classmethod
    def from_kv_blocks(
        cls,
        kv_num_blocks: Tensor,
        kv_indices: Tensor,
        full_kv_num_blocks: Tensor | None = None,
        full_kv_indices: Tensor | None = None,
        BLOCK_SIZE: int | tuple[int, int] = _DEFAULT_SPARSE_BLOCK_SIZE,
        mask_mod: Callable | None = None,
        seq_lengths: tuple[int, int] | None = None,
        compute_q_blocks: bool = True,
        **deterministic_dq: Any,
    ) -> BlockMask:
        """A BlockMask from its forward (kv) layout; the q layout is derived."""
        _check_layout(kv_indices, full_kv_num_blocks, full_kv_indices)
        q_blocks = full_q_blocks = (None, None)
        if compute_q_blocks:
            q_blocks = _transpose_ordered(kv_num_blocks, kv_indices)
            if full_kv_num_blocks is not None:
                full_q_blocks = _transpose_ordered(full_kv_num_blocks, full_kv_indices)
        if isinstance(BLOCK_SIZE, int):
            BLOCK_SIZE = (BLOCK_SIZE, BLOCK_SIZE)
        if seq_lengths is None:
            seq_lengths = (kv_indices.shape[-2] * BLOCK_SIZE[0],
                           kv_indices.shape[-1] * BLOCK_SIZE[1])  # fmt: skip
        return cls(seq_lengths, kv_num_blocks, kv_indices, full_kv_num_blocks, full_kv_indices,
                   *q_blocks, *full_q_blocks, BLOCK_SIZE, mask_mod or noop_mask,
                   **deterministic_dq)  # fmt: skip

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.kv_indices.shape[:-2]) + self.seq_lengths

    def numel(self) -> int:
        return math.prod(self.shape)

    def sparsity(self) -> float:
        """The percentage of tiles not computed."""
        computed = int(self.kv_num_blocks.sum())
        if self.full_kv_num_blocks is not None:
            computed += int(self.full_kv_num_blocks.sum())
        return 100 * (1 - computed * self.BLOCK_SIZE[0] * self.BLOCK_SIZE[1] / self.numel())

    def to_dense(self) -> Tensor:
        """The 0/1 matrix of computed tiles (partial or full)."""
        dense = _ordered_to_dense(self.kv_num_blocks, self.kv_indices, self.kv_indices.shape[-1])
        if self.full_kv_num_blocks is None:
            return dense
        full = self.full_kv_indices
        return dense | _ordered_to_dense(self.full_kv_num_blocks, full, full.shape[-1])

    def as_tuple(self, flatten: bool = True) -> tuple[Any, ...]:
        sizes = (*self.BLOCK_SIZE,) if flatten else (self.BLOCK_SIZE,)
        lengths = (*self.seq_lengths,) if flatten else (self.seq_lengths,)
        return (*lengths, self.kv_num_blocks, self.kv_indices, self.full_kv_num_blocks,
                self.full_kv_indices, self.q_num_blocks, self.q_indices, self.full_q_num_blocks,
                self.full_q_indices, self.dq_write_order, self.dq_write_order_full,
                self.dq_kv_order, self.dq_kv_order_spt, *sizes, self.mask_mod)  # fmt: skip

    def __getitem__(self, index: Any) -> BlockMask:
        """The mask of some batches, heads or query tiles (an int keeps its dimension only past
        the first three, as in PyTorch)."""
        index = index if isinstance(index, tuple) else (index,)
        padded = (*index, slice(None), slice(None), slice(None))[:3]
        index = tuple(
            (slice(i % n, i % n + 1) if isinstance(i, int) else i)
            for i, n in zip(padded, self.kv_num_blocks.shape[:3], strict=False)
        )
        full = self.full_kv_num_blocks is not None
        return BlockMask.from_kv_blocks(
            self.kv_num_blocks[index], self.kv_indices[index],
            self.full_kv_num_blocks[index] if full else None,
            self.full_kv_indices[index] if full else None,
            BLOCK_SIZE=self.BLOCK_SIZE, mask_mod=_sliced_mask_mod_error,
            seq_lengths=self.seq_lengths, compute_q_blocks=self.q_indices is not None,
        )  # fmt: skip

    def _adjust(self, new_q_len: int, new_kv_len: int) -> BlockMask:
        """The mask cropped to its upper-left new_q_len x new_kv_len corner."""
        rows = -(-new_q_len // self.BLOCK_SIZE[0])
        cols = -(-new_kv_len // self.BLOCK_SIZE[1])

        def crop(num: Tensor | None, idx: Tensor | None) -> tuple[Tensor | None, Tensor | None]:
            if num is None:
                return None, None
            idx, num = idx[..., :rows, :cols], num[..., :rows]
            num = _tg.minimum(num, _tg.tensor(cols, dtype=num.dtype))
            return (idx < num[..., None]).sum(dim=-1).to(_tg.int32), idx

        return self.from_kv_blocks(
            *crop(self.kv_num_blocks, self.kv_indices),
            *crop(self.full_kv_num_blocks, self.full_kv_indices),
            BLOCK_SIZE=self.BLOCK_SIZE, mask_mod=self.mask_mod,
            seq_lengths=(new_q_len, new_kv_len), compute_q_blocks=self.q_indices is not None,
        )  # fmt: skip

    def to(self, device: Any) -> BlockMask:
        return self

    def to_string(self, grid_size: int | tuple[int, int] = (20, 20), limit: int = 4) -> str:
        """The tiles drawn as text: full, partly or not computed."""
        dense = self.to_dense().numpy()
        *batch, rows, cols = dense.shape
        if grid_size == -1:
            grid_size = (rows, cols)
        elif isinstance(grid_size, int):
            grid_size = (grid_size, grid_size)
        row_step, col_step = (
            max(1, -(-n // g)) for n, g in zip((rows, cols), grid_size, strict=True)
        )
        pictures = []
        for count, where in enumerate(itertools.product(*map(range, batch))):
            if count == limit:
                pictures += ["...", "To print out more, set BlockMask.to_string(limit=N)",
                             "You can also index (BlockMask[batch, head]) to choose a specific "
                             "batch or head"]  # fmt: skip
                break
            tile = dense[where]
            lines = [f"{where}"]
            for r in range(0, rows, row_step):
                cells = [tile[r : r + row_step, c : c + col_step] for c in range(0, cols, col_step)]
                lines.append("".join(2 * _SHADES[int(c.all()) + int(c.any())] for c in cells))
            pictures.append("\n".join(lines) + "\n")
        return "\n".join(pictures)

    def __str__(self) -> str:
        return (f"BlockMask(shape={self.shape}, sparsity={self.sparsity():.2f}%, \n"
                f"{self.to_string().strip()}\n)")  # fmt: skip

    def __repr__(self) -> str:
        def shape(t: Tensor | None) -> Any:
            return None if t is None else t.shape

        fields = ["kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices",
                  "q_num_blocks", "q_indices", "full_q_num_blocks", "full_q_indices"]  # fmt: skip
        lines = [f"    {f}={shape(getattr(self, f))}," for f in fields]
        mod = getattr(self.mask_mod, "__name__", self.mask_mod)
        lines += [f"    BLOCK_SIZE={self.BLOCK_SIZE},", f"    shape={self.shape},",
                  f"    sparsity={self.sparsity():.2f}%,", f"    mask_mod={mod}"]  # fmt: skip
        return "BlockMask(\n" + "\n".join(lines) + "\n)"

    def _allowed(self, grid: tuple[Tensor, ...]) -> Tensor:
        """The element mask for the grid: mask_mod inside partial tiles, full tiles whole."""
        q_len, kv_len = self.seq_lengths

        def spread(num: Tensor, idx: Tensor) -> Tensor:
            tiles = _ordered_to_dense(num, idx, idx.shape[-1]).to(_tg.bool)
            tiles = tiles.repeat_interleave(self.BLOCK_SIZE[0], dim=-2)
            tiles = tiles.repeat_interleave(self.BLOCK_SIZE[1], dim=-1)
            return tiles[..., :q_len, :kv_len]

        allowed = spread(self.kv_num_blocks, self.kv_indices) & _run_mod(self.mask_mod, grid)
        if self.full_kv_num_blocks is not None:
            allowed = allowed | spread(self.full_kv_num_blocks, self.full_kv_indices)
        return allowed


def create_block_mask(
    mask_mod: Callable,
    B: int | None,
    H: int | None,
    Q_LEN: int,
    KV_LEN: int,
    device: Any = None,
    BLOCK_SIZE: int | tuple[int, int] = _DEFAULT_SPARSE_BLOCK_SIZE,
    _compile: bool = False,
    separate_full_blocks: bool = True,
    compute_dq_write_order: bool = False,
    dq_kv_order: bool = True,
) -> BlockMask:
    """The BlockMask of `mask_mod` (B or H None: one mask for every batch or head)."""
    if _positional_count(mask_mod) != 4:
        raise AssertionError(f"create-block_mask requires a mask_mod function! Got {mask_mod}")
    q_block, kv_block = (BLOCK_SIZE, BLOCK_SIZE) if isinstance(BLOCK_SIZE, int) else BLOCK_SIZE
    counts = _block_counts(create_mask(mask_mod, B, H, Q_LEN, KV_LEN), q_block, kv_block)
    whole = q_block * kv_block
    if separate_full_blocks:
        partial, full = (counts > 0) & (counts < whole), _dense_to_ordered(counts == whole)
    else:
        partial, full = counts > 0, (None, None)
    return BlockMask.from_kv_blocks(*_dense_to_ordered(partial), *full,
                                    BLOCK_SIZE=(q_block, kv_block), mask_mod=mask_mod,
                                    seq_lengths=(Q_LEN, KV_LEN))  # fmt: skip


def create_nested_block_mask(*args: Any, **kwargs: Any) -> BlockMask:
    raise _not_provided(__name__, "create_nested_block_mask (tracegrad has no nested tensors)")


def _check(query: Tensor, key: Tensor, value: Tensor, enable_gqa: bool) -> None:
    shapes = f"query {tuple(query.shape)}, key {tuple(key.shape)}, value {tuple(value.shape)}"
    if query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
        raise NotImplementedError(f"flex_attention: query, key and value must be 4-D; got {shapes}")
    if query.shape[-1] != key.shape[-1] or key.shape[-2] != value.shape[-2]:
        raise ValueError(f"flex_attention: query and key must share the embedding size and key "
                         f"and value the sequence length; got {shapes}")  # fmt: skip
    if key.shape[:2] != value.shape[:2]:
        raise ValueError(f"flex_attention: key and value must share batch and heads; got {shapes}")
    hq, hkv = query.shape[1], key.shape[1]
    if not enable_gqa and hq != hkv:
        raise ValueError(f"Expect query and key/value to have the same number of heads but got "
                         f"Hq={hq} and Hkv={hkv}. Try setting enable_gqa=True.")  # fmt: skip
    if hq % hkv:
        raise ValueError(f"Expect number of query heads to be a multiple of kv heads for GQA but "
                         f"got Hq={hq} and Hkv={hkv}.")  # fmt: skip
    if key.shape[0] not in (1, query.shape[0]):
        raise ValueError(f"flex_attention: key/value batch must be 1 or the query's; got {shapes}")


def _check_lengths(block_mask: BlockMask, q_len: int, kv_len: int) -> None:
    mask_q, mask_kv = block_mask.shape[-2:]
    if (q_len, kv_len) == (mask_q, mask_kv):
        return
    hint = ("you likely need to create a new block mask." if q_len > mask_q or kv_len > mask_kv
            else "create a new block mask with the correct length, or crop it with "
                 "block_mask._adjust(q_len, kv_len).")  # fmt: skip
    raise ValueError(f"block_mask was created for block_mask.shape={block_mask.shape} but got "
                     f"q_len={q_len} and kv_len={kv_len}: {hint}")  # fmt: skip


def flex_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    score_mod: Callable | None = None,
    block_mask: BlockMask | None = None,
    scale: float | None = None,
    enable_gqa: bool = False,
    return_lse: bool = False,
    kernel_options: dict | None = None,
    *,
    return_aux: AuxRequest | None = None,
) -> Any:
    """softmax(score_mod(scale * q @ k^T) where block_mask allows, else -inf) @ v, over
    (B, H, L, E) queries and (B, Hkv, S, E) keys. Scores are kept in float32 (float64 for
    float64 inputs); a row nothing may attend to gives zeros, and its logsumexp -inf."""
    _check(query, key, value, enable_gqa)
    if return_lse and return_aux is not None:
        raise ValueError("Cannot specify both return_lse and return_aux")
    if return_lse:
        warnings.warn("return_lse is deprecated: use return_aux=AuxRequest(lse=True)",
                      FutureWarning, stacklevel=2)  # fmt: skip
    if getattr(block_mask, "mask_mod", None) is _sliced_mask_mod_error:
        raise RuntimeError("Cannot use mask_mod from a sliced BlockMask")
    B, H, L, E = query.shape
    S = key.shape[-2]
    if block_mask is not None:
        _check_lengths(block_mask, L, S)
    precision = _tg.float64 if query.dtype == _tg.float64 else _tg.float32
    group = H // key.shape[1]
    key, value = (t.repeat_interleave(group, dim=1) if group > 1 else t for t in (key, value))
    scale = 1.0 / math.sqrt(E) if scale is None else scale
    scores = (query.to(precision) @ key.to(precision).transpose(-2, -1)) * scale
    grid = _index_grid(B, H, L, S)
    if score_mod is not None:
        scores = _run_mod(score_mod, grid, scores)
    if block_mask is not None:
        scores = _tg.where(block_mask._allowed(grid), scores, -math.inf)
    scores = scores.expand(B, H, L, S)
    peak = scores.amax(dim=-1, keepdim=True)
    shift = _tg.where(_tg.isneginf(peak), 0.0, peak).detach()
    weights = _tg.exp(scores - shift)
    total = weights.sum(dim=-1, keepdim=True)
    weights = weights / _tg.where(total == 0, 1.0, total)
    out = weights.to(query.dtype) @ value
    want_lse = return_lse or (return_aux is not None and return_aux.lse)
    with np.errstate(divide="ignore"):  # a row with nothing to attend to: -inf, silently
        lse = (_tg.log(total) + shift).squeeze(-1) if want_lse else None
    if return_aux is not None:
        max_scores = peak.squeeze(-1) if return_aux.max_scores else None
        return out, AuxOutput(lse, max_scores)
    return (out, lse) if return_lse else out
