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

What the model computes is fixed by SPEC.md ("BlockBERT: what the model computes"). In short, every head splits the
sequence into `n = config.num_blocks` blocks of `b = config.block_size` tokens and lets query block `i` attend only
key block `partner_block(i, s, n) = (i + s) mod n`, where `s` is the head's shift (`config.heads_per_shift`).

This file is copied next to saved checkpoints (`trust_remote_code`), so it imports nothing from `blockbert_hf`.
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

from .configuration_blockbert import BlockBertConfig


logger = logging.get_logger(__name__)


# ---------------------------------------------------------------------------------------------------------------------
# The attention rule (SPEC.md, "Blockwise attention")
# ---------------------------------------------------------------------------------------------------------------------


def partner_block(query_block, shift, num_blocks):
    """The blockwise rule: a query in block `i` of a head with shift `s` may attend only keys in this block.

    SPEC: a query at position `t` may attend a real key at position `u` iff `u // b == (t // b + s) mod n`. The modulus
    is always `n = config.num_blocks`, never the number of blocks a short input happens to fill, so the partner of a
    block can lie past the end of the input: such a partner block is empty and the head outputs zeros for its queries.
    Works on Python ints and on integer tensors.
    """
    return (query_block + shift) % num_blocks


def sparse_fixed_pattern(seq_len: int, stride: int, expressivity: int, device=None) -> torch.Tensor:
    """`(seq_len, seq_len)` boolean mask of the paper's SparseBERT baseline (SPEC, "Baselines"): fairseq's
    bidirectional "fixed" pattern of Child et al. with stride `l` and expressivity `c`, True where query `t` may attend
    key `u`."""
    t = torch.arange(seq_len, device=device)[:, None]
    u = torch.arange(seq_len, device=device)[None, :]
    window_start = torch.where((t % stride == 0) & (t > 0), t - stride, stride * (t // stride))
    window_end = torch.where((t % stride == 0) & (t > 0), t, stride * (t // stride) + stride)
    in_window = (u >= window_start) & (u <= window_end)
    summary = (u % stride >= stride - expressivity) | ((u % stride == 0) & (u >= stride))
    return in_window | summary


@dataclass
class HeadGroup:
    """Heads that share one shift, and everything the kernel call for them needs (built once per forward)."""

    heads: slice
    # Key tile used by each query tile; None when it is the tile itself (no copy needed).
    partner: torch.Tensor | None
    # Boolean, True where the query may attend the key; broadcasts to (batch * tiles, 1, queries, keys); None: all.
    mask: torch.Tensor | None
    # Boolean (batch * tiles, queries or 1): True where a query has no admissible key. Such queries attend their whole
    # tile inside the kernel (so no backend ever sees a fully masked row and produces NaN) and are then set to zero.
    empty: torch.Tensor | None


@dataclass
class AttentionLayout:
    """How one batch is cut into tiles for the attention kernel: `num_tiles` tiles of `tile_len` tokens per sequence
    (the input is padded from `seq_len` to `num_tiles * tile_len` inside attention only)."""

    seq_len: int
    tile_len: int
    num_tiles: int
    groups: list[HeadGroup]
    blockwise: bool
    # Whether attention weights are wanted (`output_attentions`): only then are the groups' weights put together.
    return_weights: bool = False


def _masks_for_group(allowed: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """From `allowed` (batch * tiles, queries or 1, keys), True where a query may attend a key, returns `HeadGroup`'s
    `(empty, mask)`, each None when it would select nothing."""
    empty = ~allowed.any(dim=-1)
    mask = (allowed | empty[..., None])[:, None]
    return (empty if bool(empty.any()) else None), (None if bool(mask.all()) else mask)


def _as_flex_block_mask(mask: torch.Tensor):
    """flex_attention takes masks as a `BlockMask`, built here from a boolean (rows, 1, queries or 1, keys) mask."""
    from torch.nn.attention.flex_attention import create_block_mask

    rows, _, num_queries, num_keys = mask.shape
    if num_queries == 1:

        def mask_mod(row, head, query, key):
            return mask[row, 0, 0, key]
    else:

        def mask_mod(row, head, query, key):
            return mask[row, 0, query, key]

    return create_block_mask(mask_mod, B=rows, H=None, Q_LEN=num_keys, KV_LEN=num_keys, device=mask.device)


def build_attention_layout(
    config: BlockBertConfig, key_is_real: torch.Tensor | None, batch_size: int, seq_len: int, device
) -> AttentionLayout:
    """Precomputes the per-forward tiling and masks shared by all layers.

    `key_is_real` is the boolean `(batch, seq_len)` attention mask, or None when every position is a real token.
    """
    layout = _build_attention_layout(config, key_is_real, batch_size, seq_len, device)
    if config._attn_implementation == "flex_attention":
        for group in layout.groups:
            if group.mask is not None:
                group.mask = _as_flex_block_mask(group.mask)
    return layout


def _build_attention_layout(
    config: BlockBertConfig, key_is_real: torch.Tensor | None, batch_size: int, seq_len: int, device
) -> AttentionLayout:
    if config.attention_pattern != "blockwise":
        allowed = torch.ones(batch_size, 1, seq_len, dtype=torch.bool, device=device)
        if key_is_real is not None:
            allowed = key_is_real[:, None, :]
        if config.attention_pattern == "sparse_fixed":
            pattern = sparse_fixed_pattern(seq_len, config.sparse_stride, config.sparse_expressivity, device)
            allowed = allowed & pattern
        empty, mask = _masks_for_group(allowed)
        group = HeadGroup(heads=slice(0, config.num_attention_heads), partner=None, mask=mask, empty=empty)
        return AttentionLayout(seq_len=seq_len, tile_len=seq_len, num_tiles=1, groups=[group], blockwise=False)

    # An input that fits in one block is one (unpadded) tile; otherwise tiles are whole blocks.
    tile_len = min(config.block_size, seq_len)
    num_tiles = math.ceil(seq_len / tile_len)
    padding = num_tiles * tile_len - seq_len
    if key_is_real is None:
        key_is_real = torch.ones(batch_size, seq_len, dtype=torch.bool, device=device)
    key_is_real = nn.functional.pad(key_is_real, (0, padding), value=False).view(batch_size, num_tiles, tile_len)

    query_tiles = torch.arange(num_tiles, device=device)
    groups, first_head = [], 0
    for shift, count in enumerate(config.heads_per_shift):
        heads = slice(first_head, first_head + count)
        first_head += count
        if count == 0:
            continue
        partner = partner_block(query_tiles, shift, config.num_blocks)
        past_end = partner >= num_tiles  # the partner block lies past the end of the input: it is empty
        partner = torch.where(past_end, query_tiles, partner)
        allowed = key_is_real[:, partner] & ~past_end[None, :, None]
        empty, mask = _masks_for_group(allowed.view(batch_size * num_tiles, 1, tile_len))
        is_identity = bool((partner == query_tiles).all())
        groups.append(HeadGroup(heads=heads, partner=None if is_identity else partner, mask=mask, empty=empty))
    return AttentionLayout(seq_len=seq_len, tile_len=tile_len, num_tiles=num_tiles, groups=groups, blockwise=True)


def blockwise_attentions_to_dense(attentions: torch.Tensor, config: BlockBertConfig, seq_len: int) -> torch.Tensor:
    """Expands the per-block attention probabilities a blockwise model returns with `output_attentions=True`,
    `(batch, heads, tiles, tile_len, tile_len)`, to the equivalent dense `(batch, heads, seq_len, seq_len)` matrix
    (zero outside each head's admissible blocks). For inspection and tests: this *is* the `N x N` matrix."""
    batch, num_heads, num_tiles, tile_len, _ = attentions.shape
    dense = attentions.new_zeros(batch, num_heads, num_tiles * tile_len, num_tiles * tile_len)
    shifts = config.head_shifts
    for head in range(num_heads):
        for tile in range(num_tiles):
            key_tile = partner_block(tile, shifts[head], config.num_blocks)
            if key_tile >= num_tiles:
                continue
            rows = slice(tile * tile_len, (tile + 1) * tile_len)
            cols = slice(key_tile * tile_len, (key_tile + 1) * tile_len)
            dense[:, head, rows, cols] = attentions[:, head, tile]
    return dense[:, :, :seq_len, :seq_len]


# ---------------------------------------------------------------------------------------------------------------------
# Modules (RoBERTa's, with the attention layout threaded through; parameter names match RoBERTa's)
# ---------------------------------------------------------------------------------------------------------------------


class BlockBertEmbeddings(nn.Module):
    """Word, position and token type embeddings, with RoBERTa- or BERT-style positions."""

    def __init__(self, config):
        super().__init__()
        self.position_embedding_style = config.position_embedding_style
        self.padding_idx = config.pad_token_id
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

        if position_ids is None:
            if self.position_embedding_style == "bert":
                position_ids = self.position_ids[:, :seq_length]
            elif input_ids is not None:
                # RoBERTa: real tokens get padding_idx + 1, + 2, ...; padding tokens keep padding_idx.
                is_token = input_ids.ne(self.padding_idx).int()
                position_ids = (torch.cumsum(is_token, dim=1).type_as(is_token) * is_token).long() + self.padding_idx
            else:
                position_ids = self.position_ids[:, self.padding_idx + 1 : seq_length + self.padding_idx + 1]

        if token_type_ids is None:
            token_type_ids = self.token_type_ids[:, :seq_length].expand(batch_size, seq_length)

        if inputs_embeds is None:
            inputs_embeds = self.word_embeddings(input_ids)
        embeddings = inputs_embeds + self.token_type_embeddings(token_type_ids)
        embeddings = embeddings + self.position_embeddings(position_ids)
        embeddings = self.LayerNorm(embeddings)
        embeddings = self.dropout(embeddings)
        return embeddings


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
    """Plain attention on one batch of tiles. `attention_mask` is boolean (True = may attend) or additive."""
    if scaling is None:
        scaling = query.size(-1) ** -0.5
    attn_weights = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:
            attn_weights = attn_weights.masked_fill(~attention_mask, torch.finfo(attn_weights.dtype).min)
        else:
            attn_weights = attn_weights + attention_mask
    attn_weights = nn.functional.softmax(attn_weights, dim=-1)
    attn_weights = nn.functional.dropout(attn_weights, p=dropout, training=module.training)
    attn_output = torch.matmul(attn_weights, value)
    attn_output = attn_output.transpose(1, 2).contiguous()
    return attn_output, attn_weights


def tiled_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    layout: AttentionLayout,
    attention_interface: Callable,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The attention op: `query`, `key`, `value` of shape `(batch, num_tiles * tile_len, heads, head_dim)` (already
    padded to whole tiles) -> `(batch, num_tiles * tile_len, heads * head_dim)` and the attention weights.

    Tiles are folded into the batch dimension (a view), and the kernel runs once per head group on
    `(batch * tiles, group_heads, tile_len, head_dim)`; only the key/value heads of groups with a shift are copied,
    to line each query tile up with its partner tile.
    """
    batch_size, padded_len, num_heads, head_dim = query.shape
    tiles, tile_len = layout.num_tiles, layout.tile_len
    tiled_shape = (batch_size * tiles, tile_len, num_heads, head_dim)
    query, key, value = query.view(tiled_shape), key.view(tiled_shape), value.view(tiled_shape)
    outputs, weights = [], []
    for group in layout.groups:
        group_query, group_key, group_value = (x[:, :, group.heads] for x in (query, key, value))
        if group.partner is not None:
            group_shape = (batch_size, tiles, *group_key.shape[1:])
            group_key = group_key.reshape(group_shape)[:, group.partner].flatten(0, 1)
            group_value = group_value.reshape(group_shape)[:, group.partner].flatten(0, 1)
        attn_output, attn_weights = attention_interface(
            module,
            group_query.transpose(1, 2),
            group_key.transpose(1, 2),
            group_value.transpose(1, 2),
            group.mask,
            dropout=dropout,
            scaling=scaling,
            **kwargs,
        )
        if group.empty is not None:
            # SPEC rule 1: a query with no admissible key outputs zero (and has zero probabilities).
            attn_output = attn_output.masked_fill(group.empty[:, :, None, None], 0.0)
            if attn_weights is not None:
                attn_weights = attn_weights.masked_fill(group.empty[:, None, :, None], 0.0)
        outputs.append(attn_output)
        weights.append(attn_weights)

    attn_output = torch.cat(outputs, dim=2) if len(outputs) > 1 else outputs[0]
    attn_output = attn_output.reshape(batch_size, padded_len, num_heads * head_dim)
    attn_weights = None
    if layout.return_weights and all(w is not None for w in weights):
        attn_weights = torch.cat(weights, dim=1) if len(weights) > 1 else weights[0]
        if layout.blockwise:
            attn_weights = attn_weights.view(batch_size, tiles, num_heads, tile_len, tile_len).transpose(1, 2)
    return attn_output, attn_weights


class BlockBertSelfAttention(nn.Module):
    """Multi-head self-attention that runs the kernel once per head group on `(batch * tiles)` tiles.

    Returns `(attn_output, attn_weights)`. `attn_weights` (eager kernel only, as in transformers) are the attention
    probabilities *per block* for `attention_pattern="blockwise"`: shape `(batch, heads, tiles, tile_len, tile_len)`,
    where `attn_weights[:, h, i]` are the probabilities of the queries of block `i` over the keys of block
    `partner_block(i, shift_h, n)`; positions at or past the input length are internal padding, and rows of queries
    with no admissible key are zero. `blockwise_attentions_to_dense` turns them into `(batch, heads, L, L)`. For the
    dense patterns (`"full"`, `"sparse_fixed"`) they are the usual `(batch, heads, L, L)`.
    """

    def __init__(self, config, layer_idx=None):
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
        self.layer_idx = layer_idx

    def forward(
        self, hidden_states: torch.Tensor, layout: AttentionLayout, **kwargs: Unpack[TransformersKwargs]
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        batch_size, seq_len, _ = hidden_states.shape
        padding = layout.num_tiles * layout.tile_len - seq_len
        head_shape = (batch_size, seq_len + padding, self.num_attention_heads, self.attention_head_size)
        query, key, value = (projection(hidden_states) for projection in (self.query, self.key, self.value))
        if padding:  # only a multi-block input whose length is not a multiple of b (F.pad copies even when 0)
            query, key, value = (nn.functional.pad(x, (0, 0, 0, padding)) for x in (query, key, value))
        query, key, value = (x.view(head_shape) for x in (query, key, value))
        attention_interface: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(
            self.config._attn_implementation, eager_attention_forward
        )
        attn_output, attn_weights = tiled_attention(
            self,
            query,
            key,
            value,
            layout,
            attention_interface,
            dropout=self.dropout.p if self.training else 0.0,
            scaling=self.scaling,
            **kwargs,
        )
        return attn_output[:, :seq_len], attn_weights


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
    def __init__(self, config, layer_idx=None):
        super().__init__()
        self.self = BlockBertSelfAttention(config, layer_idx=layer_idx)
        self.output = BlockBertSelfOutput(config)

    def forward(
        self, hidden_states: torch.Tensor, layout: AttentionLayout, **kwargs: Unpack[TransformersKwargs]
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        attention_output, attn_weights = self.self(hidden_states, layout, **kwargs)
        attention_output = self.output(attention_output, hidden_states)
        return attention_output, attn_weights


class BlockBertIntermediate(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        if isinstance(config.hidden_act, str):
            self.intermediate_act_fn = ACT2FN[config.hidden_act]
        else:
            self.intermediate_act_fn = config.hidden_act

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.intermediate_act_fn(self.dense(hidden_states))


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
    def __init__(self, config, layer_idx=None):
        super().__init__()
        self.attention = BlockBertAttention(config, layer_idx=layer_idx)
        self.intermediate = BlockBertIntermediate(config)
        self.output = BlockBertOutput(config)

    def forward(
        self, hidden_states: torch.Tensor, layout: AttentionLayout, **kwargs: Unpack[TransformersKwargs]
    ) -> torch.Tensor:
        attention_output, _ = self.attention(hidden_states, layout, **kwargs)
        return self.output(self.intermediate(attention_output), attention_output)


class BlockBertEncoder(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.layer = nn.ModuleList([BlockBertLayer(config, layer_idx=i) for i in range(config.num_hidden_layers)])

    def forward(
        self, hidden_states: torch.Tensor, layout: AttentionLayout, **kwargs: Unpack[TransformersKwargs]
    ) -> BaseModelOutput:
        for layer_module in self.layer:
            hidden_states = layer_module(hidden_states, layout, **kwargs)
        return BaseModelOutput(last_hidden_state=hidden_states)


class BlockBertPooler(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.activation = nn.Tanh()

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        # "Pool" by taking the hidden state of the first token (<s> / [CLS]).
        return self.activation(self.dense(hidden_states[:, 0]))


class BlockBertLMHead(nn.Module):
    """Masked language modeling head (RoBERTa's)."""

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
        return self.decoder(x)


class BlockBertClassificationHead(nn.Module):
    """Sentence-level classification head on the first token (RoBERTa's)."""

    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        classifier_dropout = (
            config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        )
        self.dropout = nn.Dropout(classifier_dropout)
        self.out_proj = nn.Linear(config.hidden_size, config.num_labels)

    def forward(self, features, **kwargs):
        x = features[:, 0, :]
        x = self.dropout(x)
        x = torch.tanh(self.dense(x))
        x = self.dropout(x)
        return self.out_proj(x)


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
    def _init_weights(self, module):
        """Initialize the weights"""
        super()._init_weights(module)
        if isinstance(module, BlockBertLMHead):
            init.zeros_(module.bias)
        elif isinstance(module, BlockBertEmbeddings):
            init.copy_(module.position_ids, torch.arange(module.position_ids.shape[-1]).expand((1, -1)))
            init.zeros_(module.token_type_ids)

    def save_pretrained(self, save_directory, *args, **kwargs):
        """Saves weights, config and this model's code; the config's `auto_map` names every BlockBERT head, so the
        folder loads with any `AutoModelFor...` and `trust_remote_code=True` where `blockbert_hf` is not installed.

        The folder also carries the extractive QA pipeline (`pipeline_question_answering.py` and
        `config.custom_pipelines`), so `pipeline("question-answering", model=folder, trust_remote_code=True)` works.
        """
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
        if pipeline_file is not None and kwargs.get("is_main_process", True):
            # Copied before saving the rest, so that push_to_hub (at the end of super().save_pretrained) uploads it.
            os.makedirs(save_directory, exist_ok=True)
            target = os.path.join(save_directory, QA_PIPELINE_FILE)
            if not (os.path.exists(target) and os.path.samefile(pipeline_file, target)):
                shutil.copyfile(pipeline_file, target)
        return super().save_pretrained(save_directory, *args, **kwargs)


def _check_inputs(config: BlockBertConfig, attention_mask: torch.Tensor | None, input_shape) -> torch.Tensor | None:
    """Raises SPEC's errors for inputs that are too long or left-padded; returns the boolean key mask or None."""
    batch_size, seq_len = input_shape
    max_len = config.max_sequence_length
    if seq_len > max_len:
        raise ValueError(
            f"The input has L = {seq_len} tokens but this model takes at most N = {max_len} "
            f"(max_position_embeddings = {config.max_position_embeddings}, {config.position_embedding_style} "
            f"positions). Truncate the input (tokenizer(..., truncation=True, max_length={max_len})) or raise N by "
            "converting the checkpoint to a longer sequence length (examples/convert_roberta_to_blockbert.py "
            "--max_seq_length)."
        )
    if attention_mask is None:
        return None
    if tuple(attention_mask.shape) != (batch_size, seq_len):
        raise ValueError(
            f"attention_mask has shape {tuple(attention_mask.shape)}, expected (batch_size, sequence_length) = "
            f"{(batch_size, seq_len)} with 1 for real tokens and 0 for padding."
        )
    is_real = attention_mask.bool()
    left_padded = (is_real[:, 1:] & ~is_real[:, :-1]).any(dim=1)
    if left_padded.any():
        rows = left_padded.nonzero().flatten().tolist()
        raise ValueError(
            f"attention_mask rows {rows} have padding before a real token. BlockBERT expects right padding (real "
            "tokens first, as RoBERTa's positions assume): use tokenizer.padding_side = 'right'."
        )
    return None if bool(is_real.all()) else is_real


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
        if (input_ids is None) ^ (inputs_embeds is not None):
            raise ValueError("You must specify exactly one of input_ids or inputs_embeds")
        input_shape = input_ids.shape if input_ids is not None else inputs_embeds.shape[:-1]
        key_is_real = _check_inputs(self.config, attention_mask, input_shape)

        embedding_output = self.embeddings(
            input_ids=input_ids, position_ids=position_ids, token_type_ids=token_type_ids, inputs_embeds=inputs_embeds
        )
        layout = build_attention_layout(self.config, key_is_real, *input_shape, device=embedding_output.device)
        layout.return_weights = bool(kwargs.get("output_attentions", self.config.output_attentions))
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
class BlockBertForSequenceClassification(BlockBertPreTrainedModel):
    def __init__(self, config: BlockBertConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.roberta = BlockBertModel(config, add_pooling_layer=False)
        self.classifier = BlockBertClassificationHead(config)
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
        outputs = self.roberta(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            return_dict=True,
            **kwargs,
        )
        logits = self.classifier(outputs[0])

        loss = None
        if labels is not None:
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
                loss = (
                    loss_fct(logits.squeeze(), labels.squeeze()) if self.num_labels == 1 else loss_fct(logits, labels)
                )
            elif self.config.problem_type == "single_label_classification":
                loss = CrossEntropyLoss()(logits.view(-1, self.num_labels), labels.view(-1))
            else:
                loss = BCEWithLogitsLoss()(logits, labels)

        return SequenceClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
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
        outputs = self.roberta(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            return_dict=True,
            **kwargs,
        )
        logits = self.classifier(self.dropout(outputs[0]))

        loss = None
        if labels is not None:
            labels = labels.to(logits.device)
            loss = CrossEntropyLoss()(logits.view(-1, self.num_labels), labels.view(-1))

        return TokenClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


@auto_docstring
class BlockBertForQuestionAnswering(BlockBertPreTrainedModel):
    def __init__(self, config: BlockBertConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.roberta = BlockBertModel(config, add_pooling_layer=False)
        self.qa_outputs = nn.Linear(config.hidden_size, config.num_labels)
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
        outputs = self.roberta(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            return_dict=True,
            **kwargs,
        )
        logits = self.qa_outputs(outputs[0])
        start_logits, end_logits = logits.split(1, dim=-1)
        start_logits = start_logits.squeeze(-1).contiguous()
        end_logits = end_logits.squeeze(-1).contiguous()

        total_loss = None
        if start_positions is not None and end_positions is not None:
            if len(start_positions.size()) > 1:
                start_positions = start_positions.squeeze(-1)
            if len(end_positions.size()) > 1:
                end_positions = end_positions.squeeze(-1)
            # Positions outside the model inputs are ignored.
            ignored_index = start_logits.size(1)
            start_positions = start_positions.clamp(0, ignored_index)
            end_positions = end_positions.clamp(0, ignored_index)
            loss_fct = CrossEntropyLoss(ignore_index=ignored_index)
            total_loss = (loss_fct(start_logits, start_positions) + loss_fct(end_logits, end_positions)) / 2

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
    "blockwise_attentions_to_dense",
    "partner_block",
    "sparse_fixed_pattern",
]
