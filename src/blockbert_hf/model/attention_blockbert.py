# Copyright 2026 The blockbert-hf authors.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
"""BlockBERT's attention: which keys a query may attend, and how one batch is laid out for a kernel to compute it.

Read top to bottom (docs/attention.md explains every rule):

1. The rule and its reference: `partner_block`, the dense `blockwise_attention` the model is checked against, and the
   SparseBERT baseline's `sparse_fixed_pattern`.
2. The layout: `build_attention_layout` cuts a batch into tiles of `block_len` tokens (the blocks of each sequence)
   and gives every group of heads that share a shift its boolean mask and partner tiles, once per forward; the
   self-attention layer asks it to put projections into tiles and to read the output back.
3. Padding-free batches: the same layout restricted to the tiles that hold a real token, and the moves of the real
   tokens into and out of them.
4. The kernels, one section each, each owning the form its mask takes: eager (boolean), sdpa (boolean; additive in
   traced programs), flex_attention (a `BlockMask`); then `attention_on_blocks`, which runs the layout's kernel.
5. Inspection: `blockwise_attentions_to_dense`.

`modeling_blockbert.py` imports this file relatively, so saved folders carry it (`trust_remote_code`).
"""

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn as nn
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs, logging

from .configuration_blockbert import BlockBertConfig


logger = logging.get_logger(__name__)


# ---------------------------------------------------------------------------------------------------------------------
# 1. The rule and its reference (docs/attention.md, "The block rule", "Baselines in the same model class")
# ---------------------------------------------------------------------------------------------------------------------


def partner_block(query_block, shift, num_blocks):
    """The blockwise rule: a query in block `i` of a head with shift `s` may attend only keys in this block.

    A query at position `t` may attend a real key at position `u` iff `u // b == (t // b + s) mod n`
    (docs/attention.md). The modulus is always `n = config.num_blocks`, never the number of blocks a short input
    happens to fill, so the partner of a block can lie past the end of the input: such a partner block is empty and
    the head outputs zeros for its queries. Works on Python ints and on integer tensors.
    """
    return (query_block + shift) % num_blocks


def blockwise_attention(query, key, value, key_is_real, head_shifts, num_blocks, block_size):
    """Blockwise attention as the paper's dense masked formula: the reference the model is checked against.

    `query`, `key`, `value`: `(batch, heads, L, head_dim)`; `key_is_real`: boolean `(batch, L)`, False for padding;
    `head_shifts`: each head's shift (`config.head_shifts`). Returns the output `(batch, heads, L, head_dim)` and the
    attention probabilities `(batch, heads, L, L)`. It builds the `L x L` scores, which the model never does.
    """
    block = torch.arange(query.shape[-2], device=query.device) // block_size
    shifts = torch.as_tensor(head_shifts, device=query.device)[:, None, None]
    allowed = block[None, None, :] == partner_block(block[None, :, None], shifts, num_blocks)  # (heads, t, u)
    allowed = allowed & key_is_real[:, None, None, :]
    scores = query @ key.transpose(-1, -2) / math.sqrt(query.shape[-1])
    probabilities = torch.softmax(scores.masked_fill(~allowed, -math.inf), dim=-1)
    # A query with no admissible key (an empty partner block) gets zero probabilities and output, not NaN.
    probabilities = probabilities.masked_fill(~allowed, 0.0)
    return probabilities @ value, probabilities


def sparse_fixed_pattern(seq_len: int, stride: int, expressivity: int, device=None) -> torch.Tensor:
    """`(seq_len, seq_len)` boolean mask of the paper's SparseBERT baseline (docs/attention.md, "Baselines"):
    fairseq's bidirectional "fixed" pattern of Child et al. with stride `l` and expressivity `c`, True where query `t`
    may attend key `u`."""
    t = torch.arange(seq_len, device=device)[:, None]
    u = torch.arange(seq_len, device=device)[None, :]
    window_start = torch.where((t % stride == 0) & (t > 0), t - stride, stride * (t // stride))
    window_end = torch.where((t % stride == 0) & (t > 0), t, stride * (t // stride) + stride)
    in_window = (u >= window_start) & (u <= window_end)
    summary = (u % stride >= stride - expressivity) | ((u % stride == 0) & (u >= stride))
    return in_window | summary


# ---------------------------------------------------------------------------------------------------------------------
# 2. The layout: blocks folded into the batch dimension as tiles, one kernel call per group of heads sharing a shift
# ---------------------------------------------------------------------------------------------------------------------


def is_traced() -> bool:
    """True under torch.jit.trace, torch.compile and torch.export: shortcuts that read tensor values would be baked
    into the traced program (a trace made on an unpadded batch would then ignore padding), and the sequence length
    may be symbolic (docs/attention.md, "Tracing and export"). Asked once per forward, by `build_attention_layout`
    (the layout keeps the answer) and by the model's input checks."""
    is_exporting = getattr(torch.compiler, "is_exporting", None)
    return torch.jit.is_tracing() or torch.compiler.is_compiling() or (is_exporting is not None and is_exporting())


@dataclass
class HeadGroup:
    """Heads that share one shift, and everything the kernel call for them needs (built once per forward)."""

    heads: slice
    # Boolean, True where the query may attend the key; broadcasts to (tiles, 1, queries, keys); None: every key.
    mask: torch.Tensor | None
    # Boolean (tiles, queries or 1): True where a query has no admissible key. Such queries attend their whole tile
    # inside the kernel (so no kernel ever sees a fully masked row and produces NaN) and then get zero output.
    empty: torch.Tensor | None
    # The tile of the keys each tile's queries attend, a (tiles,) index; None: the tile itself (shift 0).
    partner_tiles: torch.Tensor | None = None
    # `mask` in the form the layout's kernel takes, made by the kernel's section (`KERNEL_MASK_FORMS`); None: no mask.
    kernel_mask: object | None = None


@dataclass
class AttentionLayout:
    """How one batch is cut into tiles of `block_len` tokens for the attention kernel. Each sequence is padded (inside
    attention only) to `blocks_per_sequence` blocks: blockwise, the `ceil(L / b)` blocks of `b` tokens the input fills,
    or one block of `L` tokens when `L <= b`; dense patterns, one block of `L` tokens. Each block is one tile of the
    kernel's batch: `num_tiles` is `batch_size * blocks_per_sequence`, or in a padding-free layout (`packing`) the
    number of tiles that hold a real token."""

    batch_size: int
    seq_len: int
    block_len: int
    blocks_per_sequence: int
    num_tiles: int
    groups: list[HeadGroup]
    blockwise: bool
    # The kernel (`config._attn_implementation`); its section makes the groups' `kernel_mask`.
    implementation: str = "eager"
    # Built inside a traced program (`is_traced()`): masks always applied, shapes never read from tensor values.
    traced: bool = False
    # Whether q, k, v are padded from `seq_len` to `blocks_per_sequence * block_len` (always when traced with several
    # blocks: the padding is symbolic).
    pads_input: bool = False
    # Whether attention weights are wanted (`output_attentions`, eager kernel).
    return_weights: bool = False
    # Set in a padding-free layout: the layers then run on the real tokens only (`padding_free_layout`).
    packing: "TokenPacking | None" = None

    def pack(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """A layer's input as the layer computes it: the padded batch, or in a padding-free layout its real tokens."""
        return hidden_states if self.packing is None else self.packing.pack(hidden_states)

    def unpack(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """A layer's output as the next layer and the recorded hidden states see it: the padded batch (in a
        padding-free layout, with zero vectors at padding)."""
        if self.packing is None:
            return hidden_states
        return self.packing.unpack(hidden_states, self.batch_size, self.seq_len)

    def to_tiles(self, projection: torch.Tensor, num_heads: int) -> torch.Tensor:
        """A projection of the layer's input, `(batch, seq_len, heads * head_dim)` (padding-free: `(T, ...)`), as
        `(num_tiles, block_len, heads, head_dim)`: blocks folded into the batch dimension (a view unless padded)."""
        if self.packing is not None:
            return self.packing.to_tiles(projection, self, num_heads)
        if self.pads_input:  # F.pad copies even when there is nothing to pad
            padding = self.blocks_per_sequence * self.block_len - self.seq_len
            projection = nn.functional.pad(projection, (0, 0, 0, padding))
        return projection.view(self.num_tiles, self.block_len, num_heads, -1)

    def from_tiles(self, outputs: list[torch.Tensor]) -> torch.Tensor:
        """The head groups' outputs, each `(num_tiles, block_len, group_heads, head_dim)`, joined and read back at
        the layer's tokens: `(batch, seq_len, heads * head_dim)` (padding-free: `(T, ...)`)."""
        # SDPA has no `out=`: the groups' outputs are joined with one copy.
        output = torch.cat(outputs, dim=2) if len(outputs) > 1 else outputs[0]
        if self.packing is not None:
            return self.packing.from_tiles(output)
        if self.traced and self.pads_input:
            # Each token read from its tile by index: reshaping the tiles back to the padded length would make a
            # traced program guard on the (symbolic) block count.
            position = torch.arange(self.seq_len, device=output.device)
            first_tile = torch.arange(self.batch_size, device=output.device)[:, None] * self.blocks_per_sequence
            tile = first_tile + position // self.block_len
            return output[tile, position % self.block_len].flatten(2)
        padded_len = self.blocks_per_sequence * self.block_len
        output = output.reshape(self.batch_size, padded_len, output.shape[-2] * output.shape[-1])
        return output[:, : self.seq_len]


def build_attention_layout(
    config: BlockBertConfig,
    key_is_real: torch.Tensor | None,
    batch_size: int,
    seq_len: int,
    device,
    dtype: torch.dtype = torch.float32,
    return_weights: bool = False,
    padding_free: bool | None = None,
) -> AttentionLayout:
    """Precomputes the tiles and masks shared by all layers of one forward.

    `key_is_real` is the boolean `(batch, seq_len)` attention mask, or None when every position is a real token;
    `dtype` is the hidden states' (that of additive masks); `return_weights`, whether attention weights are wanted
    (`output_attentions`). A padded batch is laid out padding-free where `padding_free` (None: `config.padding_free`)
    allows (`_uses_padding_free`). Each group's mask is then put in the form the kernel takes (`KERNEL_MASK_FORMS`).
    """
    traced = is_traced()
    if config.attention_pattern == "blockwise":
        block_len, blocks_per_sequence, groups, pads_input = _blockwise_tiles(
            config, key_is_real, batch_size, seq_len, device, traced
        )
    else:
        block_len, blocks_per_sequence, pads_input = seq_len, 1, False
        groups = [_dense_pattern_group(config, key_is_real, batch_size, seq_len, device, traced)]
    layout = AttentionLayout(
        batch_size=batch_size,
        seq_len=seq_len,
        block_len=block_len,
        blocks_per_sequence=blocks_per_sequence,
        num_tiles=batch_size * blocks_per_sequence,
        groups=groups,
        # n = 1 is full attention (RoBERTa): its weights are returned in RoBERTa's shape, (batch, heads, L, L).
        blockwise=config.attention_pattern == "blockwise" and config.num_blocks > 1,
        implementation=config._attn_implementation or "eager",
        traced=traced,
        pads_input=pads_input,
        return_weights=return_weights,
    )
    if _uses_padding_free(config.padding_free if padding_free is None else padding_free, key_is_real, layout):
        layout = padding_free_layout(layout, key_is_real)
    mask_form = KERNEL_MASK_FORMS.get(layout.implementation, _boolean_mask)
    for group in layout.groups:
        group.kernel_mask = mask_form(group.mask, layout, device, dtype)
    return layout


def _masks_for_group(allowed: torch.Tensor, traced: bool) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """From `allowed` (tiles, queries or 1, keys), True where a query may attend a key, returns `HeadGroup`'s
    `(empty, mask)`; untraced, each is None when it would select nothing (so kernels can skip the mask)."""
    empty = ~allowed.any(dim=-1)
    mask = (allowed | empty[..., None])[:, None]
    if traced:
        return empty, mask
    return (empty if bool(empty.any()) else None), (None if bool(mask.all()) else mask)


def _dense_pattern_group(config, key_is_real, batch_size: int, seq_len: int, device, traced: bool) -> HeadGroup:
    """The one head group of a dense pattern (`"full"`, `"sparse_fixed"`): one tile of `L` tokens per sequence."""
    allowed = torch.ones(batch_size, 1, seq_len, dtype=torch.bool, device=device)
    if key_is_real is not None:
        allowed = key_is_real[:, None, :]
    if config.attention_pattern == "sparse_fixed":
        allowed = allowed & sparse_fixed_pattern(seq_len, config.sparse_stride, config.sparse_expressivity, device)
    empty, mask = _masks_for_group(allowed, traced)
    return HeadGroup(heads=slice(0, config.num_attention_heads), mask=mask, empty=empty)


def _blockwise_tiles(config, key_is_real, batch_size: int, seq_len: int, device, traced: bool):
    """The tiles of a blockwise forward, as `(block_len, blocks_per_sequence, groups, pads_input)`: an input that fits
    in one block is one unpadded block of `L` tokens, a longer one is cut into the `ceil(L / b)` blocks of `b` tokens
    it fills (the last one padded). The one branch on the length is `L <= b`; partners are index tensors, so a traced
    program with a symbolic `L` on one side of `b` serves every length on that side (docs/attention.md, "Tracing and
    export")."""
    block_len = config.effective_block_size
    if seq_len <= block_len:
        block_len, blocks_per_sequence, padding = seq_len, 1, 0
    else:
        blocks_per_sequence = (seq_len + block_len - 1) // block_len
        padding = blocks_per_sequence * block_len - seq_len
    if key_is_real is None:
        key_is_real = torch.ones(batch_size, seq_len, dtype=torch.bool, device=device)
    key_is_real = nn.functional.pad(key_is_real, (0, padding), value=False)
    key_is_real = key_is_real.view(batch_size, blocks_per_sequence, block_len)
    num_tiles = batch_size * blocks_per_sequence

    block = torch.arange(blocks_per_sequence, device=device)
    first_tile = torch.arange(batch_size, device=device)[:, None] * blocks_per_sequence
    groups, first_head = [], 0
    for shift, count in enumerate(config.heads_per_shift):
        heads = slice(first_head, first_head + count)
        first_head += count
        if count == 0:
            continue
        if shift == 0:  # every block is its own partner
            empty, mask = _masks_for_group(key_is_real.view(num_tiles, 1, block_len), traced)
            groups.append(HeadGroup(heads=heads, mask=mask, empty=empty))
            continue
        partner = partner_block(block, shift, config.num_blocks)
        past_end = partner >= blocks_per_sequence  # the partner lies past the input's end: no admissible key
        partner = torch.where(past_end, block, partner)
        allowed = key_is_real.index_select(1, partner) & ~past_end[None, :, None]
        empty, mask = _masks_for_group(allowed.view(num_tiles, 1, block_len), traced)
        partner_tiles = (first_tile + partner).flatten()
        groups.append(HeadGroup(heads=heads, mask=mask, empty=empty, partner_tiles=partner_tiles))
    # Traced, the padding of several blocks is symbolic, so it is applied whatever its value.
    pads_input = blocks_per_sequence > 1 and (traced or padding != 0)
    return block_len, blocks_per_sequence, groups, pads_input


def _blocks_of_group(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, group: HeadGroup
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The group's heads of `query`, `key`, `value` in tiles, `(tiles, block_len, heads, head_dim)`, as
    `(tiles, group_heads, block_len, head_dim)`, with each key/value tile replaced by the query tile's partner tile
    when the group has a shift (a copy; otherwise views)."""
    query, key, value = (x[:, :, group.heads] for x in (query, key, value))
    if group.partner_tiles is not None:
        key, value = (x.index_select(0, group.partner_tiles) for x in (key, value))
    return query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2)


# ---------------------------------------------------------------------------------------------------------------------
# 3. Padding-free batches (docs/attention.md, "Padding-free batches")
# ---------------------------------------------------------------------------------------------------------------------


@dataclass
class TokenPacking:
    """Where the real tokens of a padded `(batch, seq_len)` batch go in a padding-free forward: packed in order into
    `(T, hidden)`, and into the `R` tiles of `block_len` slots that hold at least one of them."""

    # (T,) index of each real token in the flattened `batch * seq_len` positions.
    token_index: torch.Tensor
    # (T,) the slot of each real token among the `R * block_len` slots of the tiles.
    slot_of_token: torch.Tensor

    def pack(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """`(batch, seq_len, hidden)` -> the real tokens' `(T, hidden)`."""
        return hidden_states.reshape(-1, hidden_states.shape[-1]).index_select(0, self.token_index)

    def unpack(self, hidden_states: torch.Tensor, batch_size: int, seq_len: int) -> torch.Tensor:
        """The real tokens' `(T, hidden)` -> `(batch, seq_len, hidden)`, zero at padding."""
        padded = hidden_states.new_zeros(batch_size * seq_len, hidden_states.shape[-1])
        return padded.index_copy(0, self.token_index, hidden_states).view(batch_size, seq_len, -1)

    def to_tiles(self, projection: torch.Tensor, layout: AttentionLayout, num_heads: int) -> torch.Tensor:
        """The real tokens' `(T, heads * head_dim)` placed in their tiles, `(R, block_len, heads, head_dim)`, padding
        slots zero."""
        slots = projection.new_zeros(layout.num_tiles * layout.block_len, projection.shape[-1])
        slots = slots.index_copy(0, self.slot_of_token, projection)
        return slots.view(layout.num_tiles, layout.block_len, num_heads, -1)

    def from_tiles(self, output: torch.Tensor) -> torch.Tensor:
        """`(R, block_len, heads, head_dim)` read back at the real tokens' slots: `(T, heads * head_dim)`."""
        return output.reshape(-1, output.shape[-2] * output.shape[-1]).index_select(0, self.slot_of_token)


def _uses_padding_free(padding_free: bool, key_is_real: torch.Tensor | None, layout: AttentionLayout) -> bool:
    """Whether this forward computes the real tokens only (`padding_free`): a padded batch in which every sequence has
    a real token (a sequence of padding only has no real token to compute, yet the padded computation gives its
    outputs, which a classification head reads), untraced (a traced program is one program for every input, so it
    computes padding), attention weights not asked for (they are returned per tile of the padded batch), and a kernel
    other than flex_attention (whose masks are built for the padded tiles)."""
    return (
        padding_free
        and key_is_real is not None
        and not layout.return_weights
        and not layout.traced
        and layout.implementation != "flex_attention"
        and bool(key_is_real.any(dim=-1).all())
    )


def padding_free_layout(layout: AttentionLayout, key_is_real: torch.Tensor) -> AttentionLayout:
    """The layout of a padded batch (`key_is_real`, `(batch, seq_len)` boolean) for computing its real tokens only:
    the same tiles, masks and partners as `layout`, restricted to the `R` tiles that hold a real token. A partner tile
    that holds only padding is not computed: its queries have no admissible key (`empty`), so they read their own tile
    inside the kernel and output zero, as in the padded computation. Masks are boolean (`HeadGroup.mask`)."""
    batch_size, seq_len = key_is_real.shape
    blocks, block_len = layout.blocks_per_sequence, layout.block_len
    padded = nn.functional.pad(key_is_real, (0, blocks * block_len - seq_len), value=False)
    real_tiles = padded.view(batch_size * blocks, block_len).any(dim=-1).nonzero().flatten()
    num_tiles = real_tiles.numel()
    packed_tile = torch.full((batch_size * blocks,), -1, dtype=torch.long, device=key_is_real.device)
    packed_tile[real_tiles] = torch.arange(num_tiles, device=key_is_real.device)
    token_index = key_is_real.flatten().nonzero().flatten()
    position = token_index % seq_len
    tile = token_index // seq_len * blocks + position // block_len
    packing = TokenPacking(token_index, packed_tile[tile] * block_len + position % block_len)

    groups = []
    for group in layout.groups:
        mask = None if group.mask is None else group.mask.index_select(0, real_tiles)
        empty = None if group.empty is None else group.empty.index_select(0, real_tiles)
        partner_tiles = None
        if group.partner_tiles is not None:
            partner_tiles = packed_tile[group.partner_tiles].index_select(0, real_tiles)
            own_tiles = torch.arange(num_tiles, device=key_is_real.device)
            partner_tiles = torch.where(partner_tiles < 0, own_tiles, partner_tiles)
        groups.append(
            HeadGroup(
                heads=group.heads,
                mask=None if mask is None or bool(mask.all()) else mask,
                empty=None if empty is None or not bool(empty.any()) else empty,
                partner_tiles=partner_tiles,
            )
        )
    return AttentionLayout(
        batch_size=batch_size,
        seq_len=seq_len,
        block_len=block_len,
        blocks_per_sequence=blocks,
        num_tiles=num_tiles,
        groups=groups,
        blockwise=layout.blockwise,
        implementation=layout.implementation,
        packing=packing,
    )


# ---------------------------------------------------------------------------------------------------------------------
# 4. Kernels. Each section owns its mask form, made once per forward from the groups' boolean masks.
# ---------------------------------------------------------------------------------------------------------------------

# Eager: the boolean mask as it is. -----------------------------------------------------------------------------------


def _boolean_mask(mask: torch.Tensor | None, layout: AttentionLayout, device, dtype) -> torch.Tensor | None:
    """The mask form of eager and of any kernel without its own: boolean, True where the query may attend the key."""
    return mask


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Unpack[TransformersKwargs],
):
    """Plain attention on one batch of blocks, for other models' use of the interface. `attention_mask` is boolean
    (True = may attend) or additive. BlockBERT's own eager path is `eager_attention_on_blocks`."""
    probabilities = _attention_probabilities(query, key, attention_mask, None, scaling)
    probabilities = nn.functional.dropout(probabilities, p=dropout, training=module.training)
    return torch.matmul(probabilities, value).transpose(1, 2).contiguous(), probabilities


def _attention_probabilities(query, key, mask, empty, scaling):
    """softmax(q k^T * scaling) over the admissible keys; rows of queries without an admissible key are zero."""
    if scaling is None:
        scaling = query.size(-1) ** -0.5
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling
    if mask is not None:
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        else:
            scores = scores + mask
    probabilities = nn.functional.softmax(scores, dim=-1)
    if empty is not None:
        # docs/attention.md, "Empty partner blocks": zero probabilities, hence zero output, before they meet V.
        probabilities = probabilities.masked_fill(empty[:, None, :, None], 0.0)
    return probabilities


def eager_attention_on_blocks(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    layout: AttentionLayout,
    dropout: float = 0.0,
    scaling: float | None = None,
) -> tuple[list[torch.Tensor], torch.Tensor | None]:
    """The eager kernel on tiles `(tiles, block_len, heads, head_dim)` -> per-group outputs and, when the layout asks
    for them, the attention probabilities.

    The probabilities returned are the very tensor that multiplies V (after dropout), so gradients can be taken
    through them: `(batch, heads, blocks, block_len, block_len)` for the blockwise pattern with n > 1,
    `(batch, heads, L, L)` otherwise.
    """
    probabilities, values = [], []
    for group in layout.groups:
        group_query, group_key, group_value = _blocks_of_group(query, key, value, group)
        probabilities.append(_attention_probabilities(group_query, group_key, group.mask, group.empty, scaling))
        values.append(group_value)
    if not layout.return_weights:
        outputs = [
            torch.matmul(nn.functional.dropout(weights, p=dropout, training=module.training), group_value)
            for weights, group_value in zip(probabilities, values)
        ]
        return [output.transpose(1, 2) for output in outputs], None

    used = nn.functional.dropout(torch.cat(probabilities, dim=1), p=dropout, training=module.training)
    if layout.blockwise:
        blocks, num_heads, block_len = layout.blocks_per_sequence, used.shape[1], layout.block_len
        weights = used.view(layout.batch_size, blocks, num_heads, block_len, block_len).transpose(1, 2)
        used = weights.transpose(1, 2).reshape(layout.num_tiles, num_heads, block_len, block_len)
    else:
        weights = used
    output = torch.matmul(used, torch.cat(values, dim=1))
    return [output.transpose(1, 2)], weights


# SDPA: the boolean mask, additive in traced programs. -----------------------------------------------------------------


def _sdpa_mask(mask: torch.Tensor | None, layout: AttentionLayout, device, dtype) -> torch.Tensor | None:
    """Boolean; in a traced program additive (0 or the dtype's lowest value): ONNX lowers a boolean sdpa mask to a
    `Where` over all scores and a NaN check of all probabilities (a third of a program's time), an additive mask to
    one `Add`. No row is fully masked, so both are exact."""
    if mask is None or not layout.traced:
        return mask
    return torch.zeros(mask.shape, dtype=dtype, device=device).masked_fill(~mask, torch.finfo(dtype).min)


# flex_attention: a `BlockMask` on tiles padded to a multiple of 16 tokens. -------------------------------------------

# torch's compiled CPU flex_attention gives wrong results for some lengths that are not a multiple of 16 (8, 24, 40,
# ... with torch 2.13), so flex_attention runs on tiles padded to a multiple of 16 (padded keys masked out).
FLEX_LENGTH_MULTIPLE = 16
# torch compiler errors that mean flex_attention cannot be compiled here (seen on CPU with some torch versions); matched
# by name so that importing this file does not import torch's compiler.
_COMPILE_ERRORS = ("BackendCompilerFailed", "InductorError", "CppCompileError")
# Set once flex_attention failed to compile: the process then runs sdpa instead.
_flex_unavailable = False


def _flex_padded_length(block_len: int) -> int:
    return math.ceil(block_len / FLEX_LENGTH_MULTIPLE) * FLEX_LENGTH_MULTIPLE


def _flex_block_mask(mask: torch.Tensor | None, layout: AttentionLayout, device, dtype):
    """flex_attention takes masks as a `BlockMask`: built here from the boolean (tiles, 1, queries or 1, keys) mask
    (None: every key) on tiles padded to `_flex_padded_length(block_len)`. None when nothing is masked."""
    from torch.nn.attention.flex_attention import create_block_mask  # only when flex_attention is used

    rows, block_len = layout.num_tiles, layout.block_len
    padded_len = _flex_padded_length(block_len)
    if mask is None:
        if padded_len == block_len:
            return None
        mask = torch.ones(rows, 1, 1, block_len, dtype=torch.bool, device=device)
    if mask.shape[2] != 1:  # padded queries attend the real keys (their outputs are dropped)
        mask = nn.functional.pad(mask, (0, 0, 0, padded_len - block_len), value=True)
    mask = nn.functional.pad(mask, (0, padded_len - block_len), value=False)
    if mask.shape[2] == 1:

        def mask_mod(row, head, query, key):
            return mask[row, 0, 0, key]
    else:

        def mask_mod(row, head, query, key):
            return mask[row, 0, query, key]

    return create_block_mask(mask_mod, B=rows, H=None, Q_LEN=padded_len, KV_LEN=padded_len, device=device)


def _pad_for_flex(tensors, block_len: int):
    """q, k, v of `block_len` tokens padded to the length flex_attention runs on (`_flex_padded_length`)."""
    padding = _flex_padded_length(block_len) - block_len
    if not padding:
        return tensors
    return tuple(nn.functional.pad(x, (0, 0, 0, padding)) for x in tensors)


def _flex_failed_to_compile(implementation: str, error: Exception) -> bool:
    """Whether `error` means torch cannot compile flex_attention here; if so, the rest of the process runs sdpa."""
    global _flex_unavailable
    if implementation != "flex_attention" or type(error).__name__ not in _COMPILE_ERRORS:
        return False
    _flex_unavailable = True
    logger.warning(
        f"flex_attention could not be compiled on this machine ({type(error).__name__}); BlockBERT uses the sdpa "
        "kernel instead for the rest of this process (same results)."
    )
    return True


# The mask form of each kernel that does not take the boolean mask as it is.
KERNEL_MASK_FORMS: dict[str, Callable] = {"sdpa": _sdpa_mask, "flex_attention": _flex_block_mask}


# Running the layout's kernel. -----------------------------------------------------------------------------------------


def kernel_attention_on_blocks(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    layout: AttentionLayout,
    implementation: str,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs,
) -> list[torch.Tensor]:
    """A fused kernel (sdpa, flex_attention, ...) on tiles: one call per head group on `(tiles, group_heads,
    block_len, head_dim)`; only the key/value heads of groups with a shift are copied to line each query tile up
    with its partner tile. Queries without an admissible key get zero output."""
    if implementation == "flex_attention" and _flex_unavailable:
        implementation = "sdpa"
    attention_interface: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(implementation, eager_attention_forward)
    mask_form = KERNEL_MASK_FORMS.get(implementation, _boolean_mask)
    outputs = []
    for group in layout.groups:
        group_query, group_key, group_value = _blocks_of_group(query, key, value, group)
        mask = group.kernel_mask
        if implementation != layout.implementation:  # e.g. sdpa after flex_attention failed to compile
            mask = mask_form(group.mask, layout, query.device, query.dtype)
        if implementation == "flex_attention":
            group_query, group_key, group_value = _pad_for_flex((group_query, group_key, group_value), layout.block_len)
        try:
            output, _ = attention_interface(
                module, group_query, group_key, group_value, mask, dropout=dropout, scaling=scaling, **kwargs
            )
        except Exception as error:
            if not _flex_failed_to_compile(implementation, error):
                raise
            return kernel_attention_on_blocks(module, query, key, value, layout, "sdpa", dropout, scaling, **kwargs)
        output = output[:, : layout.block_len]
        if group.empty is not None:
            # docs/attention.md, "Empty partner blocks": a query with no admissible key outputs zero.
            output = output.masked_fill(group.empty[:, :, None, None], 0.0)
        outputs.append(output)
    return outputs


def attention_on_blocks(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    layout: AttentionLayout,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs,
) -> tuple[list[torch.Tensor], torch.Tensor | None]:
    """The layout's kernel on tiles `(tiles, block_len, heads, head_dim)`: per-group outputs, and the attention
    weights (eager kernel only, as in transformers)."""
    if layout.implementation == "eager":
        return eager_attention_on_blocks(module, query, key, value, layout, dropout, scaling)
    outputs = kernel_attention_on_blocks(
        module, query, key, value, layout, layout.implementation, dropout, scaling, **kwargs
    )
    return outputs, None


# ---------------------------------------------------------------------------------------------------------------------
# 5. Inspection
# ---------------------------------------------------------------------------------------------------------------------


def blockwise_attentions_to_dense(attentions: torch.Tensor, config: BlockBertConfig, seq_len: int) -> torch.Tensor:
    """Expands the per-block attention probabilities a blockwise model returns with `output_attentions=True`,
    `(batch, heads, blocks, block_len, block_len)`, to the equivalent dense `(batch, heads, seq_len, seq_len)` matrix
    (zero outside each head's admissible blocks). For inspection and tests: this *is* the `N x N` matrix. Dense
    weights (n = 1, the dense patterns) are returned as they are."""
    if attentions.dim() == 4:
        return attentions[:, :, :seq_len, :seq_len]
    batch, num_heads, blocks_per_sequence, block_len, _ = attentions.shape
    dense = attentions.new_zeros(batch, num_heads, blocks_per_sequence * block_len, blocks_per_sequence * block_len)
    shifts = config.head_shifts
    for head in range(num_heads):
        for block in range(blocks_per_sequence):
            key_block = partner_block(block, shifts[head], config.num_blocks)
            if key_block >= blocks_per_sequence:
                continue
            rows = slice(block * block_len, (block + 1) * block_len)
            cols = slice(key_block * block_len, (key_block + 1) * block_len)
            dense[:, head, rows, cols] = attentions[:, head, block]
    return dense[:, :, :seq_len, :seq_len]
