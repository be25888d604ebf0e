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
"""BlockBERT configuration.

This file is copied next to saved checkpoints (``trust_remote_code``), so it imports nothing from ``blockbert_hf``.
"""

import copy
import math
import re

from huggingface_hub.dataclasses import strict
from transformers import PreTrainedConfig


ATTENTION_PATTERNS = ("blockwise", "full", "sparse_fixed")
POSITION_EMBEDDING_STYLES = ("roberta", "bert")
# Written to config.json beside a block size set by the user, so that loading keeps it even where it equals the
# derived value (folders saved before `block_size` could stay unset store the derived value without it).
BLOCK_SIZE_SET_BY_USER = "block_size_set_by_user"

# Every class a saved folder can be loaded as with `trust_remote_code=True` (written to `config.auto_map` on save).
AUTO_MAP = {
    "AutoConfig": "configuration_blockbert.BlockBertConfig",
    "AutoModel": "modeling_blockbert.BlockBertModel",
    "AutoModelForMaskedLM": "modeling_blockbert.BlockBertForMaskedLM",
    "AutoModelForQuestionAnswering": "modeling_blockbert.BlockBertForQuestionAnswering",
    "AutoModelForSequenceClassification": "modeling_blockbert.BlockBertForSequenceClassification",
    "AutoModelForTokenClassification": "modeling_blockbert.BlockBertForTokenClassification",
    "AutoModelForMultipleChoice": "modeling_blockbert.BlockBertForMultipleChoice",
}
# transformers 5 has no built-in "question-answering" pipeline: every saved folder carries ours (the modeling file
# imports it, so transformers copies it beside the model), found by
# `pipeline("question-answering", model=folder, trust_remote_code=True)` through this entry of config.json.
CUSTOM_PIPELINES = {
    "question-answering": {
        "impl": "pipeline_question_answering.ExtractiveQuestionAnsweringPipeline",
        "pt": ["AutoModelForQuestionAnswering"],
        "type": "text",
    }
}
_HEAD_COUNT = re.compile(r"-?[0-9]+")  # ASCII digits only: int() also reads "²"-like and other scripts' digits


def parse_heads_per_shift(value: str | list[int] | tuple[int, ...]) -> list[int]:
    """Turns the paper's notation ``"10:2"`` / ``"8:2:2"`` (or a list) into a list of head counts, one per shift."""
    if isinstance(value, str):
        parts = value.replace(" ", "").split(":")
        if not all(_HEAD_COUNT.fullmatch(part) for part in parts):
            raise ValueError(
                f"heads_per_shift={value!r} is not in the paper's notation: write one head count per shift separated "
                "by ':', e.g. '10:2' (10 heads with shift 0, 2 heads with shift 1) or '8:2:2'."
            )
        return [int(part) for part in parts]
    return [int(count) for count in value]


def default_heads_per_shift(num_attention_heads: int, num_blocks: int) -> list[int]:
    """The default head split: every shift ``s > 0`` gets ``max(1, A // 6)`` heads and shift 0 the rest
    (``[10, 2]`` and ``[8, 2, 2]`` for A = 12)."""
    if num_blocks < 1:
        raise ValueError(f"num_blocks must be >= 1, got {num_blocks}.")
    per_shift = max(1, num_attention_heads // 6)
    shift_zero = num_attention_heads - per_shift * (num_blocks - 1)
    if shift_zero < 1:
        raise ValueError(
            f"With {num_attention_heads} attention heads and num_blocks={num_blocks} the default head split leaves no "
            f"head with shift 0 ({per_shift} heads for each of the {num_blocks - 1} other shifts). Pass "
            "heads_per_shift explicitly (one count per shift, summing to num_attention_heads), or use fewer blocks."
        )
    return [shift_zero] + [per_shift] * (num_blocks - 1)


def sequence_length(max_position_embeddings: int, pad_token_id: int, position_embedding_style: str) -> int:
    """The position rows the table offers to real tokens (`C`), which is `N` unless `block_relative_positions` is on:
    RoBERTa positions reserve the rows up to the padding index (514 -> 512), BERT positions none."""
    if position_embedding_style == "roberta":
        return max_position_embeddings - pad_token_id - 1
    return max_position_embeddings


def _derived_block_size(config_dict: dict) -> int | None:
    """The block size an unset `block_size` gives, from the fields of a saved config (defaults where a field is
    missing): `ceil(N / n)`, or `C` with block-relative positions; None if they are not usable numbers."""
    defaults = BlockBertConfig.__dataclass_fields__
    positions, pad_token_id, style, num_blocks, block_relative = (
        config_dict.get(name, defaults[name].default)
        for name in (
            "max_position_embeddings",
            "pad_token_id",
            "position_embedding_style",
            "num_blocks",
            "block_relative_positions",
        )
    )
    try:
        rows = sequence_length(positions, pad_token_id, style)
        return rows if block_relative else math.ceil(rows / num_blocks)
    except (TypeError, ZeroDivisionError):
        return None


@strict
class BlockBertConfig(PreTrainedConfig):
    r"""
    Configuration of a BlockBERT model ("Blockwise Self-Attention for Long Document Understanding", Qiu et al., 2020):
    RoBERTa (or BERT, see `position_embedding_style`) whose self-attention is restricted to blocks. Defaults give a
    RoBERTa-base sized model with `N = 512` tokens, 2 blocks and the paper's "10:2" head split.

    The sequence length `N` (the most tokens one input may have) is derived from `max_position_embeddings`:
    `N = max_position_embeddings - pad_token_id - 1` with RoBERTa positions (514 -> 512), `N = max_position_embeddings`
    with BERT positions. With `block_relative_positions=True` it is `N = num_blocks * block_size` instead. It is
    available as `config.max_sequence_length`.

    Args:
        num_blocks (`int`, *optional*, defaults to 2):
            `n`, the number of blocks each sequence is split into. `n = 1` is exactly RoBERTa's full attention.
        block_size (`int`, *optional*):
            `b`, tokens per block, if you fix it: it may be larger than `ceil(N / n)`, never so small that `n * b < N`.
            Left unset, the block size in use is derived as `ceil(N / n)` from the *current* `N` and `n` each time it
            is needed, so changing `num_blocks` or `max_position_embeddings` later (or in `from_pretrained(...,
            num_blocks=4)`) changes it too. Attribute reads and `to_dict()` (hence `config.json`) give the field as
            set: an int, or `None` (`null`) when unset. `config.effective_block_size` gives the block size in use,
            always an int.
        heads_per_shift (`list[int]` or `str`, *optional*):
            One head count per shift, summing to `num_attention_heads`: the first `heads_per_shift[0]` heads use shift
            0 (query block `i` attends key block `i`), the next `heads_per_shift[1]` heads shift 1 (block `i` attends
            block `(i + 1) mod n`), and so on. The paper's notation is accepted: `"10:2"` == `[10, 2]`. Defaults to
            `[10, 2]` for 12 heads and n = 2, `[8, 2, 2]` for n = 3; otherwise each shift `s > 0` gets
            `max(1, num_attention_heads // 6)` heads and shift 0 the rest.
        attention_pattern (`str`, *optional*, defaults to `"blockwise"`):
            *Which* query/key pairs may attend: `"blockwise"` (BlockBERT), `"full"` (ordinary RoBERTa attention, the
            paper's RoBERTa-1seq baseline) or `"sparse_fixed"` (the paper's SparseBERT baseline: Child et al.'s fixed
            pattern, applied as a dense mask, so it costs as much as full attention).
            This is independent of `attn_implementation` (`"eager"`, `"sdpa"`, ...), which chooses *which kernel*
            computes the attention: every pattern runs on every kernel and gives the same result. `"blockwise"` folds
            the `n` blocks into the batch dimension, so the kernel computes `b x b` scores for each block and head and
            attention memory and FLOPs are `N^2 / n`; no `N x N` score matrix is ever built.
        sparse_stride (`int`, *optional*, defaults to 128):
            `l` of the `"sparse_fixed"` pattern.
        sparse_expressivity (`int`, *optional*, defaults to 32):
            `c` of the `"sparse_fixed"` pattern.
        position_embedding_style (`str`, *optional*, defaults to `"roberta"`):
            `"roberta"`: learned absolute positions that skip padding and start at `pad_token_id + 1`;
            `"bert"`: positions `0, 1, 2, ...` (use with `type_vocab_size=2` for BERT checkpoints).
        block_relative_positions (`bool`, *optional*, defaults to `False`):
            Positions restart at every block boundary: the real token at index `t` gets position `P + (t mod b)`
            (`P = pad_token_id + 1` with RoBERTa positions, 0 with BERT positions), so every block looks like an input
            the position table was trained on. Only with `attention_pattern="blockwise"`. Let `C` be the positions the
            table offers (`config.position_rows`: `max_position_embeddings - pad_token_id - 1` with RoBERTa positions,
            `max_position_embeddings` with BERT positions): `b` is `block_size` if set (at most `C`), else `C`, and
            `N = n * b`, no longer bound by the table; `from_pretrained(..., num_blocks=8)` then reads `8 * b` tokens.
            Position ids passed to the model are used as they are.
        sparse_prediction (`bool`, *optional*, defaults to `False`):
            As in ModernBERT: when `BlockBertForMaskedLM` gets `labels`, run the MLM head only on the positions whose
            label is not -100 and return `logits` of shape `(num_masked, vocab_size)` instead of
            `(batch, seq_len, vocab_size)`. Same loss, far less memory in pre-training (the head's logits are
            otherwise the largest activation). Without `labels` the full logits are always returned.
        padding_free (`bool`, *optional*, defaults to `True`):
            Padded batches are computed on their real tokens only: projections, feed-forward layers and layer norms
            run on the batch's real tokens, and attention on the tiles (blocks) that hold one, so a tile of padding is
            never computed (docs/attention.md, "Padding-free batches"). Same outputs at every real token as the padded
            computation; it applies in eager mode with the eager and sdpa kernels whenever the batch has padding and
            attention weights are not asked for. A batch whose labels count at padding (per-token labels other than
            -100 there, or an answer position on padding) is computed with its padding, so its loss is RoBERTa's
            (`num_blocks=1`); so is a batch with a sequence of padding only. `False` computes padding as RoBERTa does.

    The remaining fields are RoBERTa's ([`~transformers.RobertaConfig`]), with the values of the released
    `roberta-base` checkpoint as defaults: `max_position_embeddings=514` (N = 512), `layer_norm_eps=1e-05` and
    `type_vocab_size=1`, where `RobertaConfig()` defaults to `512` (N = 510) and to BERT's `1e-12` and `2`. So
    `BlockBertConfig(**fields)` and `RobertaConfig(**fields)` build the same model only when `fields` set these three;
    the converter copies them from the source checkpoint.

    Example:

    ```python
    >>> import blockbert_hf
    >>> from blockbert_hf import BlockBertConfig, BlockBertModel

    >>> config = BlockBertConfig(num_blocks=3, heads_per_shift="8:2:2", max_position_embeddings=1026)
    >>> config.max_sequence_length, config.block_size, config.effective_block_size
    (1024, None, 342)
    >>> model = BlockBertModel(config)
    ```"""

    model_type = "blockbert"

    vocab_size: int = 50265
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float | int = 0.1
    attention_probs_dropout_prob: float | int = 0.1
    max_position_embeddings: int = 514
    type_vocab_size: int = 1
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-5
    pad_token_id: int | None = 1
    bos_token_id: int | None = 0
    eos_token_id: int | list[int] | None = 2
    classifier_dropout: float | int | None = None
    tie_word_embeddings: bool = True

    num_blocks: int = 2
    block_size: int | None = None
    heads_per_shift: list[int] | str | None = None
    attention_pattern: str = "blockwise"
    sparse_stride: int = 128
    sparse_expressivity: int = 32
    position_embedding_style: str = "roberta"
    sparse_prediction: bool = False
    block_relative_positions: bool = False
    padding_free: bool = True

    def __post_init__(self, **kwargs):
        kwargs.pop(BLOCK_SIZE_SET_BY_USER, None)  # what config.json says of block_size, which `from_dict` reads
        self._check_fields_defaults_depend_on()
        if self.heads_per_shift is None:
            self.heads_per_shift = default_heads_per_shift(self.num_attention_heads, self.num_blocks)
        else:
            self.heads_per_shift = parse_heads_per_shift(self.heads_per_shift)
        super().__post_init__(**kwargs)
        # Validation runs here (construction), in `from_dict` (load, after keyword overrides), in `save_pretrained` and
        # when a model is built; not on every assignment, so `num_blocks` and `heads_per_shift` can change one by one.
        # It is not a `validate_*` method: @strict would run it a second time and wrap the ValueError.
        self.check_blockwise_fields()

    @property
    def effective_block_size(self) -> int:
        """`b`, the block size in use: `block_size` if set, else `ceil(N / n)` from the current `N` and `n` (with
        block-relative positions: else `C`, the position rows the table offers)."""
        if self.block_size is not None:
            return self.block_size
        if self.block_relative_positions:
            return self.position_rows
        return math.ceil(self.max_sequence_length / self.num_blocks)

    @property
    def position_rows(self) -> int:
        """`C`, the position rows the table offers to real tokens: `max_position_embeddings - pad_token_id - 1` with
        RoBERTa positions (514 -> 512), `max_position_embeddings` with BERT positions."""
        return sequence_length(self.max_position_embeddings, self.pad_token_id, self.position_embedding_style)

    @classmethod
    def from_dict(cls, config_dict, **kwargs):
        config_dict = dict(config_dict)
        set_by_user = config_dict.pop(BLOCK_SIZE_SET_BY_USER, False)
        block_size = config_dict.get("block_size")
        if not set_by_user and block_size is not None and block_size == _derived_block_size(config_dict):
            # Folders saved before `block_size` could stay unset store the derived value: read it as unset, so that
            # overriding `num_blocks` or `max_position_embeddings` on load derives the block size again.
            config_dict["block_size"] = None
        result = super().from_dict(config_dict, **kwargs)
        config = result[0] if isinstance(result, tuple) else result
        if isinstance(config.heads_per_shift, str):  # a keyword override in the paper's notation, e.g. "6:2"
            config.heads_per_shift = parse_heads_per_shift(config.heads_per_shift)
        config.check_blockwise_fields()  # keyword overrides are applied after construction
        return result

    def save_pretrained(self, save_directory, push_to_hub: bool = False, **kwargs):
        self.check_blockwise_fields()
        super().save_pretrained(save_directory, push_to_hub=push_to_hub, **kwargs)

    def add_remote_code_fields(self) -> None:
        """Names in this config what a saved model's folder carries for `trust_remote_code=True` (the model's
        `save_pretrained` calls it): `auto_map` with every BlockBERT head (transformers' save adds only the saved
        class) and `custom_pipelines` with the QA pipeline."""
        self.auto_map = {**(getattr(self, "auto_map", None) or {}), **AUTO_MAP}
        # A copy: transformers' pipeline() turns the "pt" names of a config's entry into classes in place.
        self.custom_pipelines = {**(getattr(self, "custom_pipelines", None) or {}), **copy.deepcopy(CUSTOM_PIPELINES)}

    def to_dict(self) -> dict:
        output = super().to_dict()
        if output.get("block_size") is not None:
            output[BLOCK_SIZE_SET_BY_USER] = True
        if not output.get("block_relative_positions", False):
            # Off (the default): left out, so that config.json of a model without the option is what it always was.
            output.pop("block_relative_positions", None)
        if output.get("padding_free", True):
            output.pop("padding_free", None)  # the default, left out like block_relative_positions
        return output

    @property
    def max_sequence_length(self) -> int:
        """`N`, the most tokens one sequence may have: the position rows the table offers (position embeddings minus
        RoBERTa's reserved rows), or `num_blocks * block_size` with block-relative positions."""
        if self.block_relative_positions:
            return self.num_blocks * self.effective_block_size
        return self.position_rows

    @property
    def head_shifts(self) -> list[int]:
        """The shift of every head, in head order: `heads_per_shift=[10, 2]` gives `[0] * 10 + [1] * 2`."""
        return [shift for shift, count in enumerate(self.heads_per_shift) for _ in range(count)]

    def _check_fields_defaults_depend_on(self):
        """The fields the defaults of `block_size` and `heads_per_shift` are computed from."""
        if self.position_embedding_style not in POSITION_EMBEDDING_STYLES:
            raise ValueError(
                f"position_embedding_style={self.position_embedding_style!r} is unknown: use one of "
                f"{POSITION_EMBEDDING_STYLES} ('roberta' for RoBERTa checkpoints, 'bert' for BERT checkpoints)."
            )
        if self.num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1 (it is n, the number of blocks), got {self.num_blocks}.")
        if self.position_embedding_style == "roberta" and self.pad_token_id is None:
            raise ValueError(
                "pad_token_id=None with position_embedding_style='roberta': RoBERTa positions start at "
                "pad_token_id + 1 and give padding the position pad_token_id. Set pad_token_id (RoBERTa's is 1), or "
                "use position_embedding_style='bert' (positions 0, 1, 2, ...)."
            )

    def check_blockwise_fields(self):
        """Raises a `ValueError` that says what to change when the blockwise fields do not fit together."""
        if self.hidden_size % self.num_attention_heads != 0:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) must be a multiple of num_attention_heads "
                f"({self.num_attention_heads})."
            )
        if self.attention_pattern not in ATTENTION_PATTERNS:
            raise ValueError(
                f"attention_pattern={self.attention_pattern!r} is unknown: use one of {ATTENTION_PATTERNS}. "
                "(The kernel is chosen separately, with attn_implementation='eager' or 'sdpa'.)"
            )
        self._check_fields_defaults_depend_on()
        if self.position_rows < 1:
            raise ValueError(
                f"max_position_embeddings={self.max_position_embeddings} leaves no room for tokens with "
                f"position_embedding_style={self.position_embedding_style!r}."
            )
        if self.block_relative_positions:
            self._check_block_relative_positions()
        n, b, length = self.num_blocks, self.effective_block_size, self.max_sequence_length
        if b < 1 or n * b < length:
            raise ValueError(
                f"num_blocks * block_size = {n} * {b} = {n * b} is smaller than the sequence length N = {length}: "
                f"the blocks must cover the sequence. Use block_size >= {math.ceil(length / n)} (= ceil(N / n)) or "
                "leave block_size unset to get that default."
            )
        counts = self.heads_per_shift
        if len(counts) != n:
            raise ValueError(
                f"heads_per_shift={counts} has {len(counts)} entries but num_blocks={n}: give one head count per "
                f"shift 0..{n - 1}, e.g. {default_heads_per_shift(self.num_attention_heads, n)}."
            )
        if any(count < 0 for count in counts):
            raise ValueError(f"heads_per_shift={counts} has a negative head count; counts must be >= 0.")
        if sum(counts) != self.num_attention_heads:
            raise ValueError(
                f"heads_per_shift={counts} sums to {sum(counts)} but num_attention_heads={self.num_attention_heads}: "
                "the counts must add up to the number of heads."
            )
        if self.attention_pattern == "blockwise":
            self._check_every_head_can_read_tokens()
        if self.sparse_stride < 1 or not 0 <= self.sparse_expressivity <= self.sparse_stride:
            raise ValueError(
                f"sparse_stride={self.sparse_stride} and sparse_expressivity={self.sparse_expressivity} must satisfy "
                "sparse_stride >= 1 and 0 <= sparse_expressivity <= sparse_stride."
            )

    def _check_every_head_can_read_tokens(self):
        """Refuses a block size that leaves heads of some shift a key block that never holds a token, whatever the
        input: with b >= N every token is in block 0 and the heads of shift s > 0 read block s."""
        n, b, length = self.num_blocks, self.effective_block_size, self.max_sequence_length
        filled = math.ceil(length / b)  # blocks 0 .. filled - 1 hold tokens of the longest input
        dead = [
            shift
            for shift, count in enumerate(self.heads_per_shift)
            if count > 0 and all((block + shift) % n >= filled for block in range(filled))
        ]
        if dead:
            raise ValueError(
                f"With block_size = {b}, the N = {length} tokens fill only {filled} of the num_blocks = {n} blocks, so "
                f"the heads of shift(s) {', '.join(map(str, dead))} (heads_per_shift={self.heads_per_shift}) read an "
                f"empty block for every input and always output zero. Use block_size <= {math.ceil(length / n)} "
                "(= ceil(N / n); leave it unset to get that), fewer blocks, or no heads for those shifts."
            )

    def _check_block_relative_positions(self):
        """Block-relative positions need blocks, and blocks no longer than the position table."""
        if self.attention_pattern != "blockwise":
            raise ValueError(
                f"block_relative_positions=True restarts positions at every block, but attention_pattern="
                f"{self.attention_pattern!r} has no blocks: use attention_pattern='blockwise' or "
                "block_relative_positions=False."
            )
        rows, b = self.position_rows, self.effective_block_size
        if b < 1 or b > rows:
            raise ValueError(
                f"block_relative_positions=True gives every token of a block its own position, but block_size={b} "
                f"is {'not positive' if b < 1 else 'more than'} the C = {rows} positions the table offers "
                f"(max_position_embeddings = {self.max_position_embeddings}, {self.position_embedding_style} "
                f"positions): use 1 <= block_size <= {rows}, or leave block_size unset to get {rows}."
            )


__all__ = ["BlockBertConfig", "default_heads_per_shift", "parse_heads_per_shift"]
