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
`attention_blockbert.py` holds that rule, its dense reference (`blockwise_attention`) and the layout of a batch in
blocks for the kernels; this file holds RoBERTa's modules, whose self-attention asks the layout for its blocks.

This file is copied next to saved checkpoints (`trust_remote_code`) with the files it imports relatively
(`attention_blockbert.py`, `configuration_blockbert.py`, `pipeline_question_answering.py` and what that imports), so
it imports nothing else from `blockbert_hf`. What a saved folder carries is the model alone: the installed package adds
its saving guarantees to these classes (`blockbert_hf.saving`), a folder loaded with `trust_remote_code` alone saves
as transformers does (docs/publishing.md).
"""

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
from transformers.modeling_utils import PreTrainedModel
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs, auto_docstring, logging
from transformers.utils.generic import can_return_tuple, merge_with_config_defaults
from transformers.utils.output_capturing import capture_outputs

# Relative imports only: transformers copies the files imported so into every saved folder, beside this one. The names
# this file does not use were defined here before it had its attention module; they stay importable from here.
from .attention_blockbert import (  # noqa: F401
    FLEX_LENGTH_MULTIPLE,
    AttentionLayout,
    HeadGroup,
    TokenPacking,
    attention_on_blocks,
    blockwise_attention,
    blockwise_attentions_to_dense,
    build_attention_layout,
    eager_attention_forward,
    eager_attention_on_blocks,
    is_traced,
    kernel_attention_on_blocks,
    padding_free_layout,
    partner_block,
    sparse_fixed_pattern,
)
from .configuration_blockbert import AUTO_MAP, BlockBertConfig

# Not used here: transformers copies a model file's relative imports into every saved folder, so the folder carries the
# question-answering pipeline that its config's `custom_pipelines` names.
from .pipeline_question_answering import ExtractiveQuestionAnsweringPipeline  # noqa: F401


logger = logging.get_logger(__name__)


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


class BlockBertSelfAttention(nn.Module):
    """Multi-head self-attention that runs the kernel on the blocks the attention layout cuts the batch into, one call
    per group of heads that share a shift (`attention_blockbert.py`).

    Returns `(attn_output, attn_weights)`. `attn_weights` (eager kernel only, as in transformers) are the attention
    probabilities that multiply V, *per block* for `attention_pattern="blockwise"` with n > 1: shape `(batch, heads,
    blocks, block_len, block_len)`, where `attn_weights[:, h, i]` are the probabilities of the queries of block `i`
    over the keys of block `partner_block(i, shift_h, n)`; positions at or past the input length are internal padding,
    and rows of queries with no admissible key are zero. `blockwise_attentions_to_dense` turns them into `(batch,
    heads, L, L)`.
    For n = 1 (RoBERTa) and the dense patterns (`"full"`, `"sparse_fixed"`) they are the usual `(batch, heads, L, L)`.
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
        # Each sequence's blocks folded into the batch dimension: `(tiles, block_len, heads, head_dim)`.
        query, key, value = (
            layout.to_tiles(projection(hidden_states), self.num_attention_heads)
            for projection in (self.query, self.key, self.value)
        )
        dropout = self.dropout.p if self.training else 0.0
        outputs, attn_weights = attention_on_blocks(self, query, key, value, layout, dropout, self.scaling, **kwargs)
        return layout.from_tiles(outputs), attn_weights


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
        # Each layer takes and returns the padded batch (so recorded hidden states and gradient checkpointing see the
        # usual shapes); in a padding-free layout it computes the real tokens only and returns zeros at padding.
        hidden_states = layout.pack(hidden_states)
        attention_output, _ = self.attention(hidden_states, layout, **kwargs)
        layer_output = self.output(self.intermediate(attention_output), attention_output)
        return layout.unpack(layer_output)


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

    @classmethod
    def _can_set_attn_implementation(cls) -> bool:
        # transformers lets `set_attn_implementation` switch kernels only if this file's source looks the kernel up in
        # its attention interface; BlockBERT does that in `attention_blockbert.py`, which that check does not read.
        return True

    def save_pretrained(self, save_directory, *args, **kwargs):
        """transformers' `save_pretrained`, refusing a config whose blockwise fields do not fit together. The folder
        also carries this model's code and its QA pipeline (`config.auto_map`, `config.custom_pipelines`), so it loads
        with any `AutoModelFor...` and `pipeline("question-answering", model=folder, trust_remote_code=True)` where
        `blockbert_hf` is not installed."""
        self.config.check_blockwise_fields()
        self.config.add_remote_code_fields()
        return super().save_pretrained(save_directory, *args, **kwargs)


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
    if isinstance(batch_size, int) and batch_size == 0:
        raise ValueError(
            f"{name} has batch size 0 (shape {tuple(given.shape)}): there is nothing to compute. Pass at least one "
            "sequence, or skip the call for an empty batch."
        )
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
    if is_traced():
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


def _check_head_mask(head_mask) -> None:
    """Refuses a `head_mask` that would mask a head: transformers 5 removed head masking, and RoBERTa takes the
    argument and ignores it. One that keeps every head (all ones) changes nothing and is accepted."""
    if head_mask is None:
        return
    if not torch.is_tensor(head_mask):
        head_mask = torch.as_tensor(head_mask)
    if is_traced() or bool((head_mask == 1).all()):
        return
    raise ValueError(
        "head_mask is not supported: transformers 5 removed head masking (RoBERTa takes head_mask and ignores it), "
        "and this head_mask would mask some heads. Leave it out; to turn heads off, zero their slice of the "
        "attention output projection (layer.attention.output.dense.weight[:, head * head_dim : (head + 1) * head_dim])."
    )


def _labels_on_padding(labels, attention_mask, ignore_index: int = -100) -> bool:
    """Whether `labels` (per token, `(batch, seq_len)`) count at a padding position of `attention_mask`."""
    if labels is None or attention_mask is None or is_traced():
        return False  # traced programs compute padding anyway (`_uses_padding_free`)
    if tuple(labels.shape) != tuple(attention_mask.shape):
        return False  # the loss reports mismatched shapes
    return bool(((labels.to(attention_mask.device) != ignore_index) & ~attention_mask.bool()).any())


def _padding_free_for_labels(config: BlockBertConfig, labels_on_padding: bool) -> bool | None:
    """The `padding_free` of a call whose labels count at padding: False (RoBERTa counts them, and a padding-free
    batch does not compute padding), with a note logged once; None (the config's) otherwise."""
    if not (labels_on_padding and config.padding_free):
        return None
    logger.warning_once(
        "Labels at padding positions (attention_mask 0) count in the loss, as in RoBERTa, so a batch with such labels "
        "is computed with its padding: padding_free does not apply to it. Per-token labels of -100 at padding (what "
        "transformers' data collators give) and answer positions on real tokens keep the padding-free speed."
    )
    return False


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
        padding_free: bool | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor] | BaseModelOutputWithPooling:
        r"""
        padding_free (`bool`, *optional*):
            For this call only, whether a padded batch is computed on its real tokens only (see
            `BlockBertConfig.padding_free`, which `None` uses). The heads pass `False` when labels count at padding.
        """
        _check_head_mask(kwargs.pop("head_mask", None))
        input_shape, key_is_real = _check_inputs(self.config, input_ids, inputs_embeds, attention_mask)

        embedding_output = self.embeddings(
            input_ids=input_ids, position_ids=position_ids, token_type_ids=token_type_ids, inputs_embeds=inputs_embeds
        )
        layout = build_attention_layout(
            self.config,
            key_is_real,
            *input_shape,
            device=embedding_output.device,
            dtype=embedding_output.dtype,
            return_weights=bool(kwargs.get("output_attentions", self.config.output_attentions)),
            padding_free=padding_free,
        )
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
            Labels for the masked language modeling loss: token ids at masked positions, -100 elsewhere. Labels at
            padding count, as in RoBERTa; a batch with such labels is then computed with its padding (`padding_free`
            does not apply to it).
        """
        outputs = self.roberta(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            return_dict=True,
            padding_free=_padding_free_for_labels(self.config, _labels_on_padding(labels, attention_mask)),
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


# RoBERTa's, except that a batch whose labels count at padding is computed with its padding
# (`_padding_free_for_labels`).
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
        labels (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
            Labels for computing the token classification loss, in `[0, ..., config.num_labels - 1]`; -100 is left
            out. Labels at padding count, as in RoBERTa; a batch with such labels is then computed with its padding
            (`padding_free` does not apply to it).
        """
        outputs = self.roberta(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            return_dict=True,
            padding_free=_padding_free_for_labels(self.config, _labels_on_padding(labels, attention_mask)),
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


def _without_padding(logits: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """`(batch, seq_len)` span logits with padding positions at the lowest value, for the loss: padding is never an
    answer, and the loss then does not depend on what is computed at padding (zero in a padding-free batch)."""
    if attention_mask is None:
        return logits
    return logits.masked_fill(~attention_mask.bool(), torch.finfo(logits.dtype).min)


def _span_labels_on_padding(attention_mask, *positions) -> bool:
    """Whether a start or end label (`(batch,)` or `(batch, 1)`) is a padding position of `attention_mask`. Labels
    at or past the sequence length are ignored by the loss, so they are not on padding."""
    if attention_mask is None or any(label is None for label in positions) or is_traced():
        return False
    seq_len = attention_mask.shape[-1]
    rows = torch.arange(attention_mask.shape[0], device=attention_mask.device)
    for label in positions:
        label = label.reshape(-1).to(attention_mask.device)
        inside = (label >= 0) & (label < seq_len)
        if bool((attention_mask[rows[inside], label[inside]] == 0).any()):
            return True
    return False


@auto_docstring
# RoBERTa's RobertaForQuestionAnswering, except that the loss leaves padding positions out (`_without_padding`),
# unless a label is a padding position: then the call is computed, and its loss counted, as RoBERTa does.
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
        start_positions, end_positions (`torch.LongTensor` of shape `(batch_size,)`, *optional*):
            The answer's first and last token; positions at or past the sequence length are left out of the loss. The
            loss's softmax leaves padding positions out (padding is never an answer), so that it does not depend on
            padding, unlike RoBERTa's, which counts them. Where a label is a padding position, the call is computed
            and its loss counted as RoBERTa does (with its padding, over every position).
        """
        roberta_loss = _span_labels_on_padding(attention_mask, start_positions, end_positions)
        outputs = self.roberta(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            return_dict=True,
            padding_free=_padding_free_for_labels(self.config, roberta_loss),
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
            loss_mask = None if roberta_loss else attention_mask
            start_loss = loss_fct(_without_padding(start_logits, loss_mask), start_positions)
            end_loss = loss_fct(_without_padding(end_logits, loss_mask), end_positions)
            total_loss = (start_loss + end_loss) / 2

        return QuestionAnsweringModelOutput(
            loss=total_loss,
            start_logits=start_logits,
            end_logits=end_logits,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )


# Saving copies this file (and those it imports) next to the weights, so the folder loads with trust_remote_code.
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
