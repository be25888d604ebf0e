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
"""PyTorch BlockBERT: RoBERTa with blockwise self-attention (Qiu et al., 2020).

What the model computes is explained in docs/attention.md. In short, every head splits the sequence into
`n = config.num_blocks` blocks of `b = config.effective_block_size` tokens and lets query block `i` attend only key
block `partner_block(i, s, n) = (i + s) mod n`, where `s` is the head's shift (`config.heads_per_shift`).
`blockwise_attention` is the same rule as a dense masked softmax, the reference the model's path is checked against.

This file is copied next to saved checkpoints (`trust_remote_code`) with the files it imports relatively
(`configuration_blockbert.py`, `saving.py`), so it imports nothing else from `blockbert_hf`.
"""

import copy
import math
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.nn import BCEWithLogitsLoss, CrossEntropyLoss, MSELoss
from transformers import initialization as init
from transformers.activations import ACT2FN, gelu
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutput,
    BaseModelOutputWithPooling,
    MaskedLMOutput,
    MultipleChoiceModelOutput,
    QuestionAnsweringModelOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, PreTrainedModel
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs, auto_docstring, logging, try_to_load_from_cache
from transformers.utils.generic import can_return_tuple, merge_with_config_defaults
from transformers.utils.output_capturing import capture_outputs

# Relative imports only: transformers copies the files imported so into every saved folder, beside this one.
from .configuration_blockbert import BlockBertConfig
from .saving import atomic_directory, set_default_file_mode


logger = logging.get_logger(__name__)


# ---------------------------------------------------------------------------------------------------------------------
# The attention rule (docs/attention.md, "The block rule")
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
# The model's path: blocks folded into the batch dimension, one kernel call per group of heads that share a shift
# ---------------------------------------------------------------------------------------------------------------------


@dataclass
class HeadGroup:
    """Heads that share one shift, and everything the kernel call for them needs (built once per forward)."""

    heads: slice
    # Boolean, True where the query may attend the key; broadcasts to (batch * blocks, 1, queries, keys); None: all.
    # Additive (0 or the dtype's lowest value) in traced sdpa programs (`build_attention_layout`).
    mask: torch.Tensor | None
    # Boolean (batch * blocks, queries or 1): True where a query has no admissible key. Such queries attend their whole
    # block inside the kernel (so no backend ever sees a fully masked row and produces NaN) and then get zero output.
    empty: torch.Tensor | None
    # `mask` as flex_attention's `BlockMask` (only with attn_implementation="flex_attention").
    flex_mask: object | None = None
    # The row (tile) of the keys each row's queries attend, a (batch * blocks,) index; None: the row itself (shift 0).
    partner_rows: torch.Tensor | None = None


@dataclass
class TokenPacking:
    """Where the real tokens of a padded `(batch, seq_len)` batch go in a padding-free forward (docs/attention.md,
    "Padding-free batches"): packed in order into `(T, hidden)`, and into the `R` tiles of `block_len` slots that hold
    at least one of them."""

    # (T,) index of each real token in the flattened `batch * seq_len` positions.
    token_index: torch.Tensor
    # (T,) the slot of each real token among the `R * block_len` slots of the tiles.
    slot_of_token: torch.Tensor


@dataclass
class AttentionLayout:
    """How one batch is cut into blocks for the attention kernel: each sequence is padded (inside attention only) to
    `blocks_per_sequence` blocks of `block_len` tokens. Blockwise: the `ceil(L / b)` blocks of `b` tokens the input
    fills, or one block of `L` tokens when `L <= b`; when traced, always the `n` blocks of `b` tokens. Dense patterns:
    one block of `L` tokens."""

    block_len: int
    blocks_per_sequence: int
    groups: list[HeadGroup]
    blockwise: bool
    # Whether q, k, v are padded from `seq_len` to `blocks_per_sequence * block_len` (always when traced with several
    # blocks: the padding is symbolic).
    pads_input: bool = False
    # Whether attention weights are wanted (`output_attentions`, eager kernel).
    return_weights: bool = False
    # Set for a padding-free forward: the layers then run on the real tokens only (`padding_free_layout`).
    packing: TokenPacking | None = None


def _is_traced() -> bool:
    """True under torch.jit.trace, torch.compile and torch.export: shortcuts that read tensor values would be baked
    into the traced program (a trace made on an unpadded batch would then ignore padding), and the sequence length
    may be symbolic (docs/attention.md, "Tracing and export")."""
    is_exporting = getattr(torch.compiler, "is_exporting", None)
    return torch.jit.is_tracing() or torch.compiler.is_compiling() or (is_exporting is not None and is_exporting())


def _masks_for_group(allowed: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """From `allowed` (batch * blocks, queries or 1, keys), True where a query may attend a key, returns
    `HeadGroup`'s `(empty, mask)`; in eager mode each is None when it would select nothing (so kernels can skip the
    mask)."""
    empty = ~allowed.any(dim=-1)
    mask = (allowed | empty[..., None])[:, None]
    if _is_traced():
        return empty, mask
    return (empty if bool(empty.any()) else None), (None if bool(mask.all()) else mask)


# torch's compiled CPU flex_attention gives wrong results for some lengths that are not a multiple of 16 (8, 24, 40,
# ... with torch 2.13), so flex_attention runs on blocks padded to a multiple of 16 (padded keys masked out).
FLEX_LENGTH_MULTIPLE = 16


def _flex_padded_length(block_len: int) -> int:
    return math.ceil(block_len / FLEX_LENGTH_MULTIPLE) * FLEX_LENGTH_MULTIPLE


def _as_flex_block_mask(mask: torch.Tensor | None, rows: int, block_len: int, device):
    """flex_attention takes masks as a `BlockMask`: built here from a boolean (rows, 1, queries or 1, keys) mask (None:
    every key) on blocks padded to `_flex_padded_length(block_len)`. None when nothing is masked."""
    from torch.nn.attention.flex_attention import create_block_mask

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


def build_attention_layout(
    config: BlockBertConfig,
    key_is_real: torch.Tensor | None,
    batch_size: int,
    seq_len: int,
    device,
    dtype: torch.dtype = torch.float32,
) -> AttentionLayout:
    """Precomputes the per-forward blocks and masks shared by all layers.

    `key_is_real` is the boolean `(batch, seq_len)` attention mask, or None when every position is a real token;
    `dtype` is the hidden states' (that of additive masks).
    """
    if config.attention_pattern != "blockwise":
        allowed = torch.ones(batch_size, 1, seq_len, dtype=torch.bool, device=device)
        if key_is_real is not None:
            allowed = key_is_real[:, None, :]
        if config.attention_pattern == "sparse_fixed":
            pattern = sparse_fixed_pattern(seq_len, config.sparse_stride, config.sparse_expressivity, device)
            allowed = allowed & pattern
        empty, mask = _masks_for_group(allowed)
        groups = [HeadGroup(heads=slice(0, config.num_attention_heads), mask=mask, empty=empty)]
        layout = AttentionLayout(block_len=seq_len, blocks_per_sequence=1, groups=groups, blockwise=False)
    else:
        layout = _blockwise_layout(config, key_is_real, batch_size, seq_len, device)
    if config._attn_implementation == "flex_attention":
        rows = batch_size * layout.blocks_per_sequence
        for group in layout.groups:
            group.flex_mask = _as_flex_block_mask(group.mask, rows, layout.block_len, device)
    elif config._attn_implementation == "sdpa" and _is_traced():
        # ONNX lowers a boolean sdpa mask to a `Where` over all scores and a NaN check of all probabilities (a third of
        # a program's time); an additive mask is one `Add`. No row is fully masked, so both are exact.
        lowest = torch.finfo(dtype).min
        for group in layout.groups:
            if group.mask is not None:
                group.mask = torch.zeros(group.mask.shape, dtype=dtype, device=device).masked_fill(~group.mask, lowest)
    return layout


def _blockwise_layout(config, key_is_real, batch_size: int, seq_len: int, device) -> AttentionLayout:
    """The tiles of a blockwise forward: an input that fits in one block is one unpadded block of `L` tokens, a longer
    one is cut into the `ceil(L / b)` blocks of `b` tokens it fills (the last one padded). The one branch on the
    length is `L <= b`; partners are index tensors, so a traced program with a symbolic `L` on one side of `b` serves
    every length on that side (docs/attention.md, "Tracing and export")."""
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

    block = torch.arange(blocks_per_sequence, device=device)
    first_row = torch.arange(batch_size, device=device)[:, None] * blocks_per_sequence
    groups, first_head = [], 0
    for shift, count in enumerate(config.heads_per_shift):
        heads = slice(first_head, first_head + count)
        first_head += count
        if count == 0:
            continue
        if shift == 0:  # every block is its own partner
            empty, mask = _masks_for_group(key_is_real.view(batch_size * blocks_per_sequence, 1, block_len))
            groups.append(HeadGroup(heads=heads, mask=mask, empty=empty))
            continue
        partner = partner_block(block, shift, config.num_blocks)
        past_end = partner >= blocks_per_sequence  # the partner lies past the input's end: no admissible key
        partner = torch.where(past_end, block, partner)
        allowed = key_is_real.index_select(1, partner) & ~past_end[None, :, None]
        empty, mask = _masks_for_group(allowed.view(batch_size * blocks_per_sequence, 1, block_len))
        partner_rows = (first_row + partner).flatten()
        groups.append(HeadGroup(heads=heads, mask=mask, empty=empty, partner_rows=partner_rows))
    # Traced, the padding of several blocks is symbolic, so it is applied whatever its value.
    pads_input = blocks_per_sequence > 1 and (_is_traced() or padding != 0)
    return AttentionLayout(block_len, blocks_per_sequence, groups, blockwise=True, pads_input=pads_input)


def blockwise_attentions_to_dense(attentions: torch.Tensor, config: BlockBertConfig, seq_len: int) -> torch.Tensor:
    """Expands the per-block attention probabilities a blockwise model returns with `output_attentions=True`,
    `(batch, heads, blocks, block_len, block_len)`, to the equivalent dense `(batch, heads, seq_len, seq_len)` matrix
    (zero outside each head's admissible blocks). For inspection and tests: this *is* the `N x N` matrix."""
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


# ---------------------------------------------------------------------------------------------------------------------
# Modules (RoBERTa's, with the attention layout threaded through; parameter names match RoBERTa's)
# ---------------------------------------------------------------------------------------------------------------------


class BlockBertEmbeddings(nn.Module):
    """Word, position and token type embeddings, with RoBERTa- or BERT-style positions; with
    `config.block_relative_positions` the positions made here restart at every block (`block_relative_position_ids`).
    """

    def __init__(self, config):
        super().__init__()
        self.position_embedding_style = config.position_embedding_style
        self.padding_idx = config.pad_token_id
        self.config = config  # read at every call, like the attention layout: `block_relative_positions`, `b`
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        position_padding_idx = self.padding_idx if self.position_embedding_style == "roberta" else None
        self.position_embeddings = nn.Embedding(
            config.max_position_embeddings, config.hidden_size, padding_idx=position_padding_idx
        )
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.position_ids = nn.Buffer(torch.arange(config.max_position_embeddings).expand((1, -1)), persistent=False)
        self.token_type_ids = nn.Buffer(torch.zeros(self.position_ids.size(), dtype=torch.long), persistent=False)

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if input_ids is not None:
            batch_size, seq_length = input_ids.shape
        else:
            batch_size, seq_length = inputs_embeds.shape[:2]

        block_relative = self.config.block_relative_positions
        if position_ids is None and block_relative:
            device = input_ids.device if input_ids is not None else inputs_embeds.device
            position_ids = self.block_relative_position_ids(input_ids, seq_length, device)
        elif position_ids is None:
            if self.position_embedding_style == "bert":
                position_ids = self.position_ids[:, :seq_length]
            elif input_ids is not None:
                # RoBERTa: real tokens get padding_idx + 1, + 2, ...; padding tokens keep padding_idx.
                is_token = input_ids.ne(self.padding_idx).int()
                position_ids = (torch.cumsum(is_token, dim=1).type_as(is_token) * is_token).long() + self.padding_idx
            else:
                position_ids = self.position_ids[:, self.padding_idx + 1 : seq_length + self.padding_idx + 1]

        if token_type_ids is None and block_relative:  # N may exceed the buffer's max_position_embeddings
            token_type_ids = self.token_type_ids.new_zeros(batch_size, seq_length)
        elif token_type_ids is None:
            token_type_ids = self.token_type_ids[:, :seq_length].expand(batch_size, seq_length)

        if inputs_embeds is None:
            inputs_embeds = self.word_embeddings(input_ids)
        embeddings = inputs_embeds + self.token_type_embeddings(token_type_ids)
        embeddings = embeddings + self.position_embeddings(position_ids)
        embeddings = self.LayerNorm(embeddings)
        embeddings = self.dropout(embeddings)
        return embeddings

    def block_relative_position_ids(
        self, input_ids: torch.LongTensor | None, seq_length: int, device=None
    ) -> torch.LongTensor:
        """Positions that restart at every block of `b = config.effective_block_size` tokens (docs/attention.md,
        "Block-relative positions"): the real token at index `t` gets `P + (t mod b)`, with `P = pad_token_id + 1`
        (RoBERTa) or 0 (BERT). RoBERTa padding (`input_ids == pad_token_id`) keeps `pad_token_id`; BERT positions
        ignore padding, as they do without the option. Without `input_ids` (`inputs_embeds`) every index counts as a
        real token. `(batch, seq_length)`, or `(1, seq_length)` where the positions do not depend on `input_ids`."""
        block_size = self.config.effective_block_size
        if self.position_embedding_style == "bert" or input_ids is None:
            first = 0 if self.position_embedding_style == "bert" else self.padding_idx + 1
            return (torch.arange(seq_length, device=device) % block_size + first)[None, :]
        is_token = input_ids.ne(self.padding_idx).long()
        index = torch.cumsum(is_token, dim=1) - 1  # the real token's index t (right padding: real tokens come first)
        return (index % block_size + 1) * is_token + self.padding_idx


def padding_free_layout(layout: AttentionLayout, key_is_real: torch.Tensor) -> AttentionLayout:
    """The layout of a padded batch (`key_is_real`, `(batch, seq_len)` boolean) for computing its real tokens only:
    the same tiles, masks and partners as `layout`, restricted to the `R` tiles that hold a real token. A partner tile
    that holds only padding is not computed: its queries have no admissible key (`empty`), so they read their own tile
    inside the kernel and output zero, as in the padded computation."""
    batch_size, seq_len = key_is_real.shape
    blocks, block_len = layout.blocks_per_sequence, layout.block_len
    padded = nn.functional.pad(key_is_real, (0, blocks * block_len - seq_len), value=False)
    real_tiles = padded.view(batch_size * blocks, block_len).any(dim=-1).nonzero().flatten()
    num_tiles = real_tiles.numel()
    row_of_tile = torch.full((batch_size * blocks,), -1, dtype=torch.long, device=key_is_real.device)
    row_of_tile[real_tiles] = torch.arange(num_tiles, device=key_is_real.device)
    token_index = key_is_real.flatten().nonzero().flatten()
    position = token_index % seq_len
    tile = token_index // seq_len * blocks + position // block_len
    packing = TokenPacking(token_index, row_of_tile[tile] * block_len + position % block_len)

    groups = []
    for group in layout.groups:
        mask = None if group.mask is None else group.mask.index_select(0, real_tiles)
        empty = None if group.empty is None else group.empty.index_select(0, real_tiles)
        partner_rows = None
        if group.partner_rows is not None:
            partner_rows = row_of_tile[group.partner_rows].index_select(0, real_tiles)
            own_rows = torch.arange(num_tiles, device=key_is_real.device)
            partner_rows = torch.where(partner_rows < 0, own_rows, partner_rows)
        groups.append(
            HeadGroup(
                heads=group.heads,
                mask=None if mask is None or bool(mask.all()) else mask,
                empty=None if empty is None or not bool(empty.any()) else empty,
                partner_rows=partner_rows,
            )
        )
    return AttentionLayout(block_len, num_tiles, groups, layout.blockwise, packing=packing)


def _blocks_of_group(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, group: HeadGroup
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The group's heads of `query`, `key`, `value` in blocks, `(batch * blocks, block_len, heads, head_dim)`, as
    `(batch * blocks, group_heads, block_len, head_dim)`, with each key/value block replaced by the query block's
    partner block when the group has a shift (a copy; otherwise views)."""
    query, key, value = (x[:, :, group.heads] for x in (query, key, value))
    if group.partner_rows is not None:
        key, value = (x.index_select(0, group.partner_rows) for x in (key, value))
    return query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2)


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
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The eager kernel on blocks `(batch * blocks, block_len, heads, head_dim)` -> per-group outputs and, when the
    layout asks for them, the attention probabilities.

    The probabilities returned are the very tensor that multiplies V (after dropout), so gradients can be taken
    through them: `(batch, heads, blocks, block_len, block_len)` for the blockwise pattern, `(batch, heads, L, L)`
    otherwise.
    """
    blocks = layout.blocks_per_sequence
    batch_size = query.shape[0] // blocks
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
        num_heads, block_len = used.shape[1], layout.block_len
        weights = used.view(batch_size, blocks, num_heads, block_len, block_len).transpose(1, 2)
        used = weights.transpose(1, 2).reshape(batch_size * blocks, num_heads, block_len, block_len)
    else:
        weights = used
    output = torch.matmul(used, torch.cat(values, dim=1))
    return [output.transpose(1, 2)], weights


# torch compiler errors that mean flex_attention cannot be compiled here (seen on CPU with some torch versions); matched
# by name so that importing this file does not import torch's compiler.
_COMPILE_ERRORS = ("BackendCompilerFailed", "InductorError", "CppCompileError")
_flex_unavailable = False


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
    """A fused kernel (sdpa, flex_attention, ...) on blocks: one call per head group on `(batch * blocks, group_heads,
    block_len, head_dim)`; only the key/value heads of groups with a shift are copied to line each query block up
    with its partner block. Queries without an admissible key get zero output."""
    global _flex_unavailable
    if implementation == "flex_attention" and _flex_unavailable:
        implementation = "sdpa"
    attention_interface: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(implementation, eager_attention_forward)
    outputs = []
    for group in layout.groups:
        group_query, group_key, group_value = _blocks_of_group(query, key, value, group)
        mask = group.mask
        if implementation == "flex_attention":
            mask, padding = group.flex_mask, _flex_padded_length(layout.block_len) - layout.block_len
            if padding:
                group_query, group_key, group_value = (
                    nn.functional.pad(x, (0, 0, 0, padding)) for x in (group_query, group_key, group_value)
                )
        try:
            output, _ = attention_interface(
                module, group_query, group_key, group_value, mask, dropout=dropout, scaling=scaling, **kwargs
            )
            output = output[:, : layout.block_len]
        except Exception as error:
            if implementation != "flex_attention" or type(error).__name__ not in _COMPILE_ERRORS:
                raise
            _flex_unavailable = True
            logger.warning(
                f"flex_attention could not be compiled on this machine ({type(error).__name__}); BlockBERT uses the "
                "sdpa kernel instead for the rest of this process (same results)."
            )
            return kernel_attention_on_blocks(module, query, key, value, layout, "sdpa", dropout, scaling, **kwargs)
        if group.empty is not None:
            # docs/attention.md, "Empty partner blocks": a query with no admissible key outputs zero.
            output = output.masked_fill(group.empty[:, :, None, None], 0.0)
        outputs.append(output)
    return outputs


class BlockBertSelfAttention(nn.Module):
    """Multi-head self-attention that runs the kernel on the `batch * blocks` blocks, once per head group.

    Returns `(attn_output, attn_weights)`. `attn_weights` (eager kernel only, as in transformers) are the attention
    probabilities that multiply V, *per block* for `attention_pattern="blockwise"`: shape `(batch, heads, blocks,
    block_len, block_len)`, where `attn_weights[:, h, i]` are the probabilities of the queries of block `i` over the
    keys of block `partner_block(i, shift_h, n)`; positions at or past the input length are internal padding, and rows
    of queries with no admissible key are zero. `blockwise_attentions_to_dense` turns them into `(batch, heads, L, L)`.
    For the dense patterns (`"full"`, `"sparse_fixed"`) they are the usual `(batch, heads, L, L)`.
    """

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = config.hidden_size // config.num_attention_heads
        self.all_head_size = self.num_attention_heads * self.attention_head_size
        self.scaling = self.attention_head_size**-0.5

        self.query = nn.Linear(config.hidden_size, self.all_head_size)
        self.key = nn.Linear(config.hidden_size, self.all_head_size)
        self.value = nn.Linear(config.hidden_size, self.all_head_size)
        self.dropout = nn.Dropout(config.attention_probs_dropout_prob)
        self.is_causal = False

    def forward(
        self, hidden_states: torch.Tensor, layout: AttentionLayout, **kwargs: Unpack[TransformersKwargs]
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        query, key, value = (projection(hidden_states) for projection in (self.query, self.key, self.value))
        if layout.packing is not None:
            return self._attend_packed(query, key, value, layout, **kwargs), None
        batch_size, seq_len, _ = hidden_states.shape
        padded_len = layout.blocks_per_sequence * layout.block_len
        if layout.pads_input:  # F.pad copies even when there is nothing to pad
            query, key, value = (nn.functional.pad(x, (0, 0, 0, padded_len - seq_len)) for x in (query, key, value))
        # Blocks folded into the batch dimension (a view).
        blocks_shape = (batch_size * layout.blocks_per_sequence, layout.block_len, self.num_attention_heads, -1)
        query, key, value = (x.view(blocks_shape) for x in (query, key, value))
        outputs, attn_weights = self._attend_blocks(query, key, value, layout, **kwargs)
        # SDPA has no `out=`: the groups' outputs are joined with one copy.
        attn_output = torch.cat(outputs, dim=2) if len(outputs) > 1 else outputs[0]
        if _is_traced() and layout.pads_input:
            # Each token read from its block by index: reshaping the blocks back to `padded_len` would make a traced
            # program guard on the (symbolic) block count.
            position = torch.arange(seq_len, device=attn_output.device)
            first_row = torch.arange(batch_size, device=attn_output.device)[:, None] * layout.blocks_per_sequence
            row = first_row + position // layout.block_len
            return attn_output[row, position % layout.block_len].flatten(2), attn_weights
        attn_output = attn_output.reshape(batch_size, padded_len, self.all_head_size)
        return attn_output[:, :seq_len], attn_weights

    def _attend_blocks(self, query, key, value, layout: AttentionLayout, **kwargs):
        """The kernel on blocks `(tiles, block_len, heads, head_dim)`: per-group outputs and the weights (eager)."""
        dropout = self.dropout.p if self.training else 0.0
        implementation = self.config._attn_implementation or "eager"
        if implementation == "eager":
            return eager_attention_on_blocks(self, query, key, value, layout, dropout, self.scaling)
        return kernel_attention_on_blocks(
            self, query, key, value, layout, implementation, dropout, self.scaling, **kwargs
        ), None

    def _attend_packed(self, query, key, value, layout: AttentionLayout, **kwargs) -> torch.Tensor:
        """Padding-free: `(T, all_head_size)` projections of the real tokens are placed in the tiles that hold them
        (padding slots zero), attended tile by tile, and read back at the real tokens' slots."""
        packing, slots = layout.packing, layout.blocks_per_sequence * layout.block_len
        tiles_shape = (layout.blocks_per_sequence, layout.block_len, self.num_attention_heads, -1)
        query, key, value = (
            x.new_zeros(slots, self.all_head_size).index_copy(0, packing.slot_of_token, x).view(tiles_shape)
            for x in (query, key, value)
        )
        outputs, _ = self._attend_blocks(query, key, value, layout, **kwargs)
        attn_output = torch.cat(outputs, dim=2) if len(outputs) > 1 else outputs[0]
        return attn_output.reshape(slots, self.all_head_size).index_select(0, packing.slot_of_token)


# Copied from transformers.models.roberta.modeling_roberta.RobertaSelfOutput with Roberta->BlockBert
class BlockBertSelfOutput(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states: torch.Tensor, input_tensor: torch.Tensor) -> torch.Tensor:
        hidden_states = self.dense(hidden_states)
        hidden_states = self.dropout(hidden_states)
        hidden_states = self.LayerNorm(hidden_states + input_tensor)
        return hidden_states


class BlockBertAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.self = BlockBertSelfAttention(config)
        self.output = BlockBertSelfOutput(config)

    def forward(
        self, hidden_states: torch.Tensor, layout: AttentionLayout, **kwargs: Unpack[TransformersKwargs]
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        attention_output, attn_weights = self.self(hidden_states, layout, **kwargs)
        attention_output = self.output(attention_output, hidden_states)
        return attention_output, attn_weights


# Copied from transformers.models.roberta.modeling_roberta.RobertaIntermediate with Roberta->BlockBert
class BlockBertIntermediate(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        if isinstance(config.hidden_act, str):
            self.intermediate_act_fn = ACT2FN[config.hidden_act]
        else:
            self.intermediate_act_fn = config.hidden_act

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        hidden_states = self.dense(hidden_states)
        hidden_states = self.intermediate_act_fn(hidden_states)
        return hidden_states


# Copied from transformers.models.roberta.modeling_roberta.RobertaOutput with Roberta->BlockBert
class BlockBertOutput(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.intermediate_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states: torch.Tensor, input_tensor: torch.Tensor) -> torch.Tensor:
        hidden_states = self.dense(hidden_states)
        hidden_states = self.dropout(hidden_states)
        hidden_states = self.LayerNorm(hidden_states + input_tensor)
        return hidden_states


class BlockBertLayer(GradientCheckpointingLayer):
    def __init__(self, config):
        super().__init__()
        self.attention = BlockBertAttention(config)
        self.intermediate = BlockBertIntermediate(config)
        self.output = BlockBertOutput(config)

    def forward(
        self, hidden_states: torch.Tensor, layout: AttentionLayout, **kwargs: Unpack[TransformersKwargs]
    ) -> torch.Tensor:
        packing = layout.packing
        if packing is not None:
            # Each layer takes and returns the padded batch (so recorded hidden states and gradient checkpointing see
            # the usual shapes) and computes its real tokens only; its padding positions are zero.
            padded_shape = hidden_states.shape
            hidden_states = hidden_states.reshape(-1, padded_shape[-1]).index_select(0, packing.token_index)
        attention_output, _ = self.attention(hidden_states, layout, **kwargs)
        layer_output = self.output(self.intermediate(attention_output), attention_output)
        if packing is None:
            return layer_output
        padded = layer_output.new_zeros(padded_shape[0] * padded_shape[1], padded_shape[-1])
        return padded.index_copy(0, packing.token_index, layer_output).view(padded_shape)


class BlockBertEncoder(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.layer = nn.ModuleList([BlockBertLayer(config) for _ in range(config.num_hidden_layers)])

    def forward(
        self, hidden_states: torch.Tensor, layout: AttentionLayout, **kwargs: Unpack[TransformersKwargs]
    ) -> BaseModelOutput:
        for layer_module in self.layer:
            hidden_states = layer_module(hidden_states, layout, **kwargs)
        return BaseModelOutput(last_hidden_state=hidden_states)


# Copied from transformers.models.roberta.modeling_roberta.RobertaPooler with Roberta->BlockBert
class BlockBertPooler(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.activation = nn.Tanh()

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        # We "pool" the model by simply taking the hidden state corresponding
        # to the first token.
        first_token_tensor = hidden_states[:, 0]
        pooled_output = self.dense(first_token_tensor)
        pooled_output = self.activation(pooled_output)
        return pooled_output


# Copied from transformers.models.roberta.modeling_roberta.RobertaLMHead with Roberta->BlockBert
class BlockBertLMHead(nn.Module):
    """BlockBert Head for masked language modeling."""

    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

        self.decoder = nn.Linear(config.hidden_size, config.vocab_size)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, features, **kwargs):
        x = self.dense(features)
        x = gelu(x)
        x = self.layer_norm(x)

        # project back to size of vocabulary with bias
        x = self.decoder(x)

        return x


# Copied from transformers.models.roberta.modeling_roberta.RobertaClassificationHead with Roberta->BlockBert
class BlockBertClassificationHead(nn.Module):
    """Head for sentence-level classification tasks."""

    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        classifier_dropout = (
            config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        )
        self.dropout = nn.Dropout(classifier_dropout)
        self.out_proj = nn.Linear(config.hidden_size, config.num_labels)

    def forward(self, features, **kwargs):
        x = features[:, 0, :]  # take <s> token (equiv. to [CLS])
        x = self.dropout(x)
        x = self.dense(x)
        x = torch.tanh(x)
        x = self.dropout(x)
        x = self.out_proj(x)
        return x


# Every class a saved folder can be loaded as with `trust_remote_code=True` (written to `config.auto_map`).
AUTO_MAP = {
    "AutoConfig": "configuration_blockbert.BlockBertConfig",
    "AutoModel": "modeling_blockbert.BlockBertModel",
    "AutoModelForMaskedLM": "modeling_blockbert.BlockBertForMaskedLM",
    "AutoModelForQuestionAnswering": "modeling_blockbert.BlockBertForQuestionAnswering",
    "AutoModelForSequenceClassification": "modeling_blockbert.BlockBertForSequenceClassification",
    "AutoModelForTokenClassification": "modeling_blockbert.BlockBertForTokenClassification",
    "AutoModelForMultipleChoice": "modeling_blockbert.BlockBertForMultipleChoice",
}

# Names of the weight files of a save: one file or shards.
_WEIGHT_FILE_PREFIXES = ("model.safetensors", "model-", "pytorch_model")

# transformers 5 has no built-in "question-answering" pipeline: every saved folder carries ours (a code file beside
# this one, found by `pipeline("question-answering", model=folder, trust_remote_code=True)`).
QA_PIPELINE_FILE = "pipeline_question_answering.py"
CUSTOM_PIPELINES = {
    "question-answering": {
        "impl": "pipeline_question_answering.ExtractiveQuestionAnsweringPipeline",
        "pt": ["AutoModelForQuestionAnswering"],
        "type": "text",
    }
}


def _find_qa_pipeline_file(config) -> str | None:
    """Where the QA pipeline's source is: beside this file (the installed package), else in the folder or Hub repo
    the model was loaded from (trust_remote_code copies only the modeling files into its module cache)."""
    beside = os.path.join(os.path.dirname(os.path.abspath(__file__)), QA_PIPELINE_FILE)
    if os.path.isfile(beside):
        return beside
    source = getattr(config, "_name_or_path", None) or getattr(config, "name_or_path", None)
    if not source:
        return None
    if os.path.isdir(source):
        candidate = os.path.join(source, QA_PIPELINE_FILE)
        return candidate if os.path.isfile(candidate) else None
    try:
        cached = try_to_load_from_cache(source, QA_PIPELINE_FILE)
    except Exception:  # not a Hub repo id: nothing cached
        return None
    return cached if isinstance(cached, str) and os.path.isfile(cached) else None


@auto_docstring
class BlockBertPreTrainedModel(PreTrainedModel):
    config: BlockBertConfig
    config_class = BlockBertConfig
    base_model_prefix = "roberta"
    supports_gradient_checkpointing = True
    _supports_sdpa = True
    _supports_flex_attn = True  # inference only on CPU (torch's flex_attention has no CPU backward)
    _supports_attention_backend = True
    _can_record_outputs = {
        "hidden_states": BlockBertLayer,
        "attentions": BlockBertSelfAttention,
    }

    @torch.no_grad()
    # Copied from transformers.models.roberta.modeling_roberta.RobertaPreTrainedModel._init_weights with Roberta->BlockBert  # noqa: E501
    def _init_weights(self, module):
        """Initialize the weights"""
        super()._init_weights(module)
        if isinstance(module, BlockBertLMHead):
            init.zeros_(module.bias)
        elif isinstance(module, BlockBertEmbeddings):
            init.copy_(module.position_ids, torch.arange(module.position_ids.shape[-1]).expand((1, -1)))
            init.zeros_(module.token_type_ids)

    def save_pretrained(self, save_directory, *args, **kwargs):
        """Saves weights, config and this model's code (this file and those it imports: `configuration_blockbert.py`,
        `saving.py`); the config's `auto_map` names every BlockBERT head, so the folder loads with any
        `AutoModelFor...` and `trust_remote_code=True` where `blockbert_hf` is not installed.

        The folder also carries the extractive QA pipeline (`pipeline_question_answering.py` and
        `config.custom_pipelines`), so `pipeline("question-answering", model=folder, trust_remote_code=True)` works.

        Everything is written to a staging folder first and moved into `save_directory` only once complete, so a save
        that fails half-way leaves `save_directory` as it was. Files already there that this save does not write (a
        tokenizer saved earlier, say) are kept; weight files of an earlier save are replaced.
        """
        self.config.check_blockwise_fields()
        self.config.auto_map = {**(getattr(self.config, "auto_map", None) or {}), **AUTO_MAP}
        custom_pipelines = dict(getattr(self.config, "custom_pipelines", None) or {})
        pipeline_file = _find_qa_pipeline_file(self.config)
        if pipeline_file is not None:
            # A copy: transformers' pipeline() turns the "pt" names of a config's entry into classes in place.
            custom_pipelines.update(copy.deepcopy(CUSTOM_PIPELINES))
        elif custom_pipelines.pop("question-answering", None) is not None:
            logger.warning(
                f"{QA_PIPELINE_FILE} was not found beside the model code nor in {self.config._name_or_path!r}: the "
                "saved folder will not carry the question-answering pipeline."
            )
        if custom_pipelines or getattr(self.config, "custom_pipelines", None):
            self.config.custom_pipelines = custom_pipelines
        if not kwargs.get("is_main_process", True):
            return super().save_pretrained(save_directory, *args, **kwargs)

        target = os.path.abspath(save_directory)
        if os.path.isfile(target):
            raise ValueError(f"save_pretrained needs a folder, but {save_directory!r} is a file.")
        if kwargs.get("push_to_hub"):
            kwargs.setdefault("repo_id", os.path.basename(target))  # not the staging folder's name
        # transformers removes an earlier save's weight shards from the folder it writes to, which here is the staging
        # folder: `replaced_prefixes` does that for the real one.
        with atomic_directory(target, update=True, replaced_prefixes=_WEIGHT_FILE_PREFIXES) as staging:
            if pipeline_file is not None:
                # Copied before the rest, so that push_to_hub (at the end of super().save_pretrained) uploads it.
                shutil.copyfile(pipeline_file, staging / QA_PIPELINE_FILE)
            result = super().save_pretrained(staging, *args, **kwargs)
            for weights in staging.glob("*.safetensors"):
                # safetensors >= 0.8 writes its files owner-only whatever the umask (safetensors/safetensors#782).
                set_default_file_mode(weights)
        return result


def _check_inputs(
    config: BlockBertConfig, input_ids, inputs_embeds, attention_mask: torch.Tensor | None
) -> tuple[tuple[int, int], torch.Tensor | None]:
    """Raises a clear `ValueError` for inputs the model cannot take (docs/attention.md, "Inputs"); returns
    `(batch_size, seq_len)` and the boolean key mask, or None for the mask when every position is a real token."""
    if (input_ids is None) == (inputs_embeds is None):
        raise ValueError("Pass exactly one of input_ids or inputs_embeds.")
    name, given = ("input_ids", input_ids) if input_ids is not None else ("inputs_embeds", inputs_embeds)
    expected_dims = 2 if input_ids is not None else 3
    if given.dim() != expected_dims:
        raise ValueError(
            f"{name} has shape {tuple(given.shape)}; expected {expected_dims} dimensions, (batch_size, "
            f"sequence_length{'' if input_ids is not None else ', hidden_size'}). For a single sequence add the batch "
            f"dimension ({name}[None]), or let the tokenizer make it: tokenizer(text, return_tensors='pt')."
        )
    batch_size, seq_len = given.shape[:2]
    max_len = config.max_sequence_length

    def empty_message():
        return f"{name} has sequence length 0: every sequence needs at least one token (a tokenizer adds <s> and </s>)."

    def too_long_message():
        if config.block_relative_positions:
            return (
                f"The input has L = {seq_len} tokens but this model takes at most N = {max_len} (block-relative "
                f"positions: N = num_blocks * block_size = {config.num_blocks} * {config.effective_block_size}). "
                f"Truncate the input (tokenizer(..., truncation=True, max_length={max_len})) or raise N with more "
                "blocks (from_pretrained(folder, num_blocks=..., heads_per_shift=...))."
            )
        return (
            f"The input has L = {seq_len} tokens but this model takes at most N = {max_len} "
            f"(max_position_embeddings = {config.max_position_embeddings}, {config.position_embedding_style} "
            f"positions). Truncate the input (tokenizer(..., truncation=True, max_length={max_len})) or raise N by "
            "converting the checkpoint to a longer sequence length (examples/convert_roberta_to_blockbert.py "
            "--max_seq_length)."
        )

    if isinstance(seq_len, torch.SymInt):
        # A symbolic length (torch.export, torch.compile(dynamic=True)): checks the program asserts, never a branch.
        torch._check(seq_len > 0, empty_message)
        torch._check(seq_len <= max_len, too_long_message)
    elif seq_len == 0:
        raise ValueError(empty_message())
    elif seq_len > max_len:
        raise ValueError(too_long_message())
    if attention_mask is None:
        return (batch_size, seq_len), None
    if tuple(attention_mask.shape) != (batch_size, seq_len):
        raise ValueError(
            f"attention_mask has shape {tuple(attention_mask.shape)}, expected (batch_size, sequence_length) = "
            f"{(batch_size, seq_len)} with 1 for real tokens and 0 for padding."
        )
    is_real = attention_mask.bool()
    if _is_traced():
        # A traced program keeps the mask (a trace of an unpadded batch must still honour padding later) and cannot
        # raise on tensor values: right padding is checked on the host before calling it.
        return (batch_size, seq_len), is_real
    left_padded = (is_real[:, 1:] & ~is_real[:, :-1]).any(dim=1)
    if left_padded.any():
        rows = left_padded.nonzero().flatten().tolist()
        raise ValueError(
            f"attention_mask rows {rows} have padding before a real token. BlockBERT expects right padding (real "
            "tokens first, as RoBERTa's positions assume): use tokenizer.padding_side = 'right'."
        )
    return (batch_size, seq_len), (None if bool(is_real.all()) else is_real)


def _without_padding(logits: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """`(batch, seq_len)` span logits with padding positions at the lowest value, for the loss: padding is never an
    answer, and the loss then does not depend on what is computed at padding (zero in a padding-free batch)."""
    if attention_mask is None:
        return logits
    return logits.masked_fill(~attention_mask.bool(), torch.finfo(logits.dtype).min)


@auto_docstring
class BlockBertModel(BlockBertPreTrainedModel):
    _no_split_modules = ["BlockBertEmbeddings", "BlockBertLayer"]

    def __init__(self, config: BlockBertConfig, add_pooling_layer=True):
        r"""
        add_pooling_layer (bool, *optional*, defaults to `True`):
            Whether to add a pooling layer
        """
        super().__init__(config)
        config.check_blockwise_fields()  # fields may have been edited after the config was built
        self.config = config
        self.gradient_checkpointing = False
        self.embeddings = BlockBertEmbeddings(config)
        self.encoder = BlockBertEncoder(config)
        self.pooler = BlockBertPooler(config) if add_pooling_layer else None
        self.post_init()

    def get_input_embeddings(self):
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, value):
        self.embeddings.word_embeddings = value

    def _computes_padding_free(self, key_is_real: torch.Tensor | None, layout: AttentionLayout) -> bool:
        """Whether this forward computes the real tokens only (`config.padding_free`; docs/attention.md,
        "Padding-free batches"): a padded batch with at least one real token, in eager mode (a traced program is one
        program for every input, so it computes padding), attention weights not asked for (they are returned per
        tile of the padded batch), and a kernel other than flex_attention (whose masks are built for the padded
        tiles)."""
        return (
            self.config.padding_free
            and key_is_real is not None
            and not layout.return_weights
            and not _is_traced()
            and self.config._attn_implementation != "flex_attention"
            and bool(key_is_real.any())
        )

    @merge_with_config_defaults
    @capture_outputs
    @auto_docstring
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor] | BaseModelOutputWithPooling:
        input_shape, key_is_real = _check_inputs(self.config, input_ids, inputs_embeds, attention_mask)

        embedding_output = self.embeddings(
            input_ids=input_ids, position_ids=position_ids, token_type_ids=token_type_ids, inputs_embeds=inputs_embeds
        )
        layout = build_attention_layout(
            self.config, key_is_real, *input_shape, device=embedding_output.device, dtype=embedding_output.dtype
        )
        layout.return_weights = bool(kwargs.get("output_attentions", self.config.output_attentions))
        if self._computes_padding_free(key_is_real, layout):
            layout = padding_free_layout(layout, key_is_real)
        encoder_outputs = self.encoder(embedding_output, layout, **kwargs)
        sequence_output = encoder_outputs.last_hidden_state
        pooled_output = self.pooler(sequence_output) if self.pooler is not None else None
        return BaseModelOutputWithPooling(last_hidden_state=sequence_output, pooler_output=pooled_output)


@auto_docstring
class BlockBertForMaskedLM(BlockBertPreTrainedModel):
    _tied_weights_keys = {
        "lm_head.decoder.weight": "roberta.embeddings.word_embeddings.weight",
        "lm_head.decoder.bias": "lm_head.bias",
    }

    def __init__(self, config: BlockBertConfig):
        super().__init__(config)
        self.roberta = BlockBertModel(config, add_pooling_layer=False)
        self.lm_head = BlockBertLMHead(config)
        self.post_init()

    def get_output_embeddings(self):
        return self.lm_head.decoder

    def set_output_embeddings(self, new_embeddings):
        self.lm_head.decoder = new_embeddings

    @can_return_tuple
    @auto_docstring
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor] | MaskedLMOutput:
        r"""
        labels (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
            Labels for the masked language modeling loss: token ids at masked positions, -100 elsewhere.
        """
        outputs = self.roberta(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            return_dict=True,
            **kwargs,
        )
        sequence_output = outputs[0]
        if labels is not None:
            labels = labels.to(sequence_output.device)
            if self.config.sparse_prediction:
                # Only the positions that carry a label go through the head (see `BlockBertConfig.sparse_prediction`).
                labels = labels.reshape(-1)
                is_predicted = labels != -100
                sequence_output = sequence_output.reshape(labels.shape[0], -1)[is_predicted]
                labels = labels[is_predicted]
        prediction_scores = self.lm_head(sequence_output)

        masked_lm_loss = None
        if labels is not None:
            masked_lm_loss = CrossEntropyLoss()(prediction_scores.view(-1, self.config.vocab_size), labels.view(-1))

        return MaskedLMOutput(
            loss=masked_lm_loss,
            logits=prediction_scores,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )


@auto_docstring(
    custom_intro="""
    BlockBERT with a sequence classification/regression head on top (a linear layer on the first token's output).
    """
)
# Copied from transformers.models.roberta.modeling_roberta.RobertaForSequenceClassification with Roberta->BlockBert
class BlockBertForSequenceClassification(BlockBertPreTrainedModel):
    def __init__(self, config: BlockBertConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.config = config

        self.roberta = BlockBertModel(config, add_pooling_layer=False)
        self.classifier = BlockBertClassificationHead(config)

        # Initialize weights and apply final processing
        self.post_init()

    @can_return_tuple
    @auto_docstring
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor] | SequenceClassifierOutput:
        r"""
        token_type_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
            Segment token indices to indicate first and second portions of the inputs. Indices are selected in `[0,1]`:

            - 0 corresponds to a *sentence A* token,
            - 1 corresponds to a *sentence B* token.
            This parameter can only be used when the model is initialized with `type_vocab_size` parameter with value
            >= 2. All the value in this tensor should be always < type_vocab_size.

            [What are token type IDs?](../glossary#token-type-ids)
        """
        outputs = self.roberta(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            return_dict=True,
            **kwargs,
        )
        sequence_output = outputs[0]
        logits = self.classifier(sequence_output)

        loss = None
        if labels is not None:
            # move labels to correct device
            labels = labels.to(logits.device)
            if self.config.problem_type is None:
                if self.num_labels == 1:
                    self.config.problem_type = "regression"
                elif self.num_labels > 1 and (labels.dtype == torch.long or labels.dtype == torch.int):
                    self.config.problem_type = "single_label_classification"
                else:
                    self.config.problem_type = "multi_label_classification"

            if self.config.problem_type == "regression":
                loss_fct = MSELoss()
                if self.num_labels == 1:
                    loss = loss_fct(logits.squeeze(), labels.squeeze())
                else:
                    loss = loss_fct(logits, labels)
            elif self.config.problem_type == "single_label_classification":
                loss_fct = CrossEntropyLoss()
                loss = loss_fct(logits.view(-1, self.num_labels), labels.view(-1))
            elif self.config.problem_type == "multi_label_classification":
                loss_fct = BCEWithLogitsLoss()
                loss = loss_fct(logits, labels)

        return SequenceClassifierOutput(
            loss=loss,
            logits=logits,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )


@auto_docstring
class BlockBertForMultipleChoice(BlockBertPreTrainedModel):
    def __init__(self, config: BlockBertConfig):
        super().__init__(config)
        self.roberta = BlockBertModel(config)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, 1)
        self.post_init()

    @can_return_tuple
    @auto_docstring
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor] | MultipleChoiceModelOutput:
        r"""
        input_ids (`torch.LongTensor` of shape `(batch_size, num_choices, sequence_length)`):
            Indices of input sequence tokens in the vocabulary.
        token_type_ids (`torch.LongTensor` of shape `(batch_size, num_choices, sequence_length)`, *optional*):
            Segment token indices.
        position_ids (`torch.LongTensor` of shape `(batch_size, num_choices, sequence_length)`, *optional*):
            Indices of positions of each input sequence tokens in the position embeddings.
        inputs_embeds (`torch.Tensor` of shape `(batch_size, num_choices, sequence_length, hidden_size)`, *optional*):
            Embedded inputs, instead of `input_ids`.
        """
        num_choices = input_ids.shape[1] if input_ids is not None else inputs_embeds.shape[1]

        def flatten(tensor, trailing_dims=1):
            return None if tensor is None else tensor.reshape(-1, *tensor.shape[-trailing_dims:])

        outputs = self.roberta(
            flatten(input_ids),
            position_ids=flatten(position_ids),
            token_type_ids=flatten(token_type_ids),
            attention_mask=flatten(attention_mask),
            inputs_embeds=flatten(inputs_embeds, trailing_dims=2),
            return_dict=True,
            **kwargs,
        )
        logits = self.classifier(self.dropout(outputs[1]))
        reshaped_logits = logits.view(-1, num_choices)

        loss = None
        if labels is not None:
            labels = labels.to(reshaped_logits.device)
            loss = CrossEntropyLoss()(reshaped_logits, labels)

        return MultipleChoiceModelOutput(
            loss=loss, logits=reshaped_logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


@auto_docstring
# Copied from transformers.models.roberta.modeling_roberta.RobertaForTokenClassification with Roberta->BlockBert
class BlockBertForTokenClassification(BlockBertPreTrainedModel):
    def __init__(self, config: BlockBertConfig):
        super().__init__(config)
        self.num_labels = config.num_labels

        self.roberta = BlockBertModel(config, add_pooling_layer=False)
        classifier_dropout = (
            config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        )
        self.dropout = nn.Dropout(classifier_dropout)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)

        # Initialize weights and apply final processing
        self.post_init()

    @can_return_tuple
    @auto_docstring
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor] | TokenClassifierOutput:
        r"""
        token_type_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
            Segment token indices to indicate first and second portions of the inputs. Indices are selected in `[0,1]`:

            - 0 corresponds to a *sentence A* token,
            - 1 corresponds to a *sentence B* token.
            This parameter can only be used when the model is initialized with `type_vocab_size` parameter with value
            >= 2. All the value in this tensor should be always < type_vocab_size.

            [What are token type IDs?](../glossary#token-type-ids)
        """
        outputs = self.roberta(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            return_dict=True,
            **kwargs,
        )

        sequence_output = outputs[0]

        sequence_output = self.dropout(sequence_output)
        logits = self.classifier(sequence_output)

        loss = None
        if labels is not None:
            # move labels to correct device
            labels = labels.to(logits.device)
            loss_fct = CrossEntropyLoss()
            loss = loss_fct(logits.view(-1, self.num_labels), labels.view(-1))

        return TokenClassifierOutput(
            loss=loss,
            logits=logits,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )


@auto_docstring
# Copied from transformers.models.roberta.modeling_roberta.RobertaForQuestionAnswering with Roberta->BlockBert
class BlockBertForQuestionAnswering(BlockBertPreTrainedModel):
    def __init__(self, config: BlockBertConfig):
        super().__init__(config)
        self.num_labels = config.num_labels

        self.roberta = BlockBertModel(config, add_pooling_layer=False)
        self.qa_outputs = nn.Linear(config.hidden_size, config.num_labels)

        # Initialize weights and apply final processing
        self.post_init()

    @can_return_tuple
    @auto_docstring
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        start_positions: torch.LongTensor | None = None,
        end_positions: torch.LongTensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor] | QuestionAnsweringModelOutput:
        r"""
        token_type_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
            Segment token indices to indicate first and second portions of the inputs. Indices are selected in `[0,1]`:

            - 0 corresponds to a *sentence A* token,
            - 1 corresponds to a *sentence B* token.
            This parameter can only be used when the model is initialized with `type_vocab_size` parameter with value
            >= 2. All the value in this tensor should be always < type_vocab_size.

            [What are token type IDs?](../glossary#token-type-ids)
        """
        outputs = self.roberta(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            return_dict=True,
            **kwargs,
        )

        sequence_output = outputs[0]

        logits = self.qa_outputs(sequence_output)
        start_logits, end_logits = logits.split(1, dim=-1)
        start_logits = start_logits.squeeze(-1).contiguous()
        end_logits = end_logits.squeeze(-1).contiguous()

        total_loss = None
        if start_positions is not None and end_positions is not None:
            # If we are on multi-GPU, split add a dimension
            if len(start_positions.size()) > 1:
                start_positions = start_positions.squeeze(-1)
            if len(end_positions.size()) > 1:
                end_positions = end_positions.squeeze(-1)
            # sometimes the start/end positions are outside our model inputs, we ignore these terms
            ignored_index = start_logits.size(1)
            start_positions = start_positions.clamp(0, ignored_index)
            end_positions = end_positions.clamp(0, ignored_index)

            loss_fct = CrossEntropyLoss(ignore_index=ignored_index)
            start_loss = loss_fct(_without_padding(start_logits, attention_mask), start_positions)
            end_loss = loss_fct(_without_padding(end_logits, attention_mask), end_positions)
            total_loss = (start_loss + end_loss) / 2

        return QuestionAnsweringModelOutput(
            loss=total_loss,
            start_logits=start_logits,
            end_logits=end_logits,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )


# Saving copies this file (and the config's) next to the weights, so the folder loads with trust_remote_code.
for _auto_class, _target in AUTO_MAP.items():
    _class = BlockBertConfig if _auto_class == "AutoConfig" else globals()[_target.split(".")[1]]
    _class.register_for_auto_class(_auto_class)


__all__ = [
    "BlockBertForMaskedLM",
    "BlockBertForMultipleChoice",
    "BlockBertForQuestionAnswering",
    "BlockBertForSequenceClassification",
    "BlockBertForTokenClassification",
    "BlockBertModel",
    "BlockBertPreTrainedModel",
    "blockwise_attention",
    "blockwise_attentions_to_dense",
    "partner_block",
    "sparse_fixed_pattern",
]
