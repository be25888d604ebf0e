"""Verification of a converted checkpoint on real text (`verify_conversion`).

The source and the converted model run on text tokenized by the checkpoint's own tokenizer; `check_tokenizer_on_text`
first makes sure that tokenizer really tokenizes the text (not mostly unknown tokens). The converted weights with
`n = 1` must reproduce the source, and the chosen configuration must compute, on inputs shorter than a block, what the
`n = 1` model computes with its shift > 0 heads silenced (docs/attention.md).
"""

import copy
import os
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedTokenizerBase

from ..model.configuration_blockbert import BlockBertConfig
from ..model.modeling_blockbert import BlockBertModel, BlockBertPreTrainedModel
from ..tokenization import read_text_lines
from .errors import ConversionError, TokenizerError
from .weights import ConvertedCheckpoint


VERIFICATION_TOLERANCE = 1e-4  # float32 checkpoints: n = 1 must reproduce the source to this
# Verification text that a tokenizer leaves this unknown, or turns into fewer tokens than half its words, is not
# tokenized by the checkpoint's own tokenizer (a real BERT vocabulary leaves about 0.1% of WikiText unknown).
MAX_UNKNOWN_TOKEN_SHARE = 0.05
MIN_TOKENS_PER_WORD = 0.5


@dataclass
class VerificationCheck:
    name: str
    max_abs_diff: float
    tolerance: float | None  # None: reported only
    lengths: list[int]

    @property
    def passed(self) -> bool:
        return self.tolerance is None or self.max_abs_diff <= self.tolerance


def sample_sentences(path: str | os.PathLike, count: int = 8) -> list[str]:
    """`count` paragraphs of a text file, skipping WikiText headings (` = Title = `)."""
    if count < 1:
        raise ConversionError(f"The number of verification paragraphs must be at least 1, got {count}.")
    if not os.path.isfile(path):
        raise ConversionError(
            f"Verification text {str(path)!r} is not a file: pass a UTF-8 text file (.txt or .txt.gz)."
        )
    lines = [line for line in read_text_lines(str(path)) if not line.startswith("=")]
    if not lines:
        raise ConversionError(f"{path} has no text lines to verify the conversion with.")
    return lines[:count]


@dataclass
class TextCoverage:
    """How a tokenizer tokenizes the verification text: words (split at white space), tokens, unknown tokens."""

    words: int
    tokens: int
    unknown: int

    @property
    def unknown_share(self) -> float:
        return self.unknown / max(self.tokens, 1)

    @property
    def is_real_tokenization(self) -> bool:
        return self.tokens >= MIN_TOKENS_PER_WORD * self.words and self.unknown_share <= MAX_UNKNOWN_TOKEN_SHARE


def measure_text_coverage(tokenizer: PreTrainedTokenizerBase, texts: Sequence[str]) -> TextCoverage:
    """Tokenizes `texts` whole (no special tokens, no truncation) and counts words, tokens and unknown tokens."""
    encoded = tokenizer(list(texts), add_special_tokens=False, verbose=False)["input_ids"]
    unknown_id = tokenizer.unk_token_id
    return TextCoverage(
        words=sum(len(text.split()) for text in texts),
        tokens=sum(len(ids) for ids in encoded),
        unknown=0 if unknown_id is None else sum(ids.count(unknown_id) for ids in encoded),
    )


def check_tokenizer_on_text(converted: ConvertedCheckpoint, texts: Sequence[str]) -> TextCoverage:
    """The coverage of `texts` by the checkpoint's tokenizer; `TokenizerError` where the tokenizer cannot be the
    checkpoint's own (mostly unknown tokens, or far fewer tokens than words): verification would run on noise."""
    coverage = measure_text_coverage(converted.tokenizer, texts)
    if not coverage.is_real_tokenization:
        raise TokenizerError(
            f"The tokenizer from {converted.tokenizer_source!r} turns the verification text ({coverage.words} words) "
            f"into {coverage.tokens} tokens, {coverage.unknown} of them unknown ({coverage.unknown_share:.0%}): it is "
            "not a tokenizer that fits this checkpoint, or the text is in a language it does not cover. Pass the "
            "checkpoint's own tokenizer with --tokenizer_name PATH, or text in its language with --verification_text "
            "FILE."
        )
    return coverage


def with_blockwise_fields(model: BlockBertPreTrainedModel, **fields) -> BlockBertPreTrainedModel:
    """A copy of `model` (same weights) whose config has other blockwise fields, e.g. `num_blocks=1`."""
    config = BlockBertConfig.from_dict({**model.config.to_dict(), "block_size": None, **fields})
    kwargs = {"add_pooling_layer": model.pooler is not None} if isinstance(model, BlockBertModel) else {}
    clone = type(model)(config, **kwargs)
    clone.load_state_dict(model.state_dict())
    clone.set_attn_implementation(model.config._attn_implementation)
    return clone.eval()


def _silence_heads(model: BlockBertPreTrainedModel, heads: Sequence[int]) -> BlockBertPreTrainedModel:
    """A copy of a full-attention `model` in which the given heads output zero (their columns of the attention
    output projection are zeroed): what a blockwise model computes for inputs of `L <= b` tokens, whose shift > 0 heads
    see an empty partner block (docs/attention.md)."""
    silenced = copy.deepcopy(model)
    head_size = model.config.hidden_size // model.config.num_attention_heads
    base = silenced.roberta if hasattr(silenced, "roberta") else silenced
    with torch.no_grad():
        for layer in base.encoder.layer:
            for head in heads:
                layer.attention.output.dense.weight[:, head * head_size : (head + 1) * head_size] = 0
    return silenced


def _outputs(model, batch) -> dict[str, torch.Tensor]:
    """Hidden states (and pooler output, MLM logits where the model has them) of a source or BlockBERT model."""
    with torch.no_grad():
        if hasattr(model, "lm_head") or hasattr(model, "cls"):
            output = model(**batch, output_hidden_states=True)
            logits = output.logits if hasattr(output, "logits") else output.prediction_logits
            return {"logits": logits, "last_hidden_state": output.hidden_states[-1]}
        output = model(**batch)
        result = {"last_hidden_state": output.last_hidden_state}
        if output.pooler_output is not None:
            result["pooler_output"] = output.pooler_output
        return result


def _max_difference(first: dict, second: dict, real: torch.Tensor) -> float:
    worst = 0.0
    for name in first.keys() & second.keys():
        a, b = first[name], second[name]
        if a.dim() == 3:  # per token: real tokens only
            a, b = a[real], b[real]
        worst = max(worst, (a - b).abs().max().item())
    return worst


def _batch(tokenizer, texts: Sequence[str], max_length: int) -> tuple[dict, torch.Tensor]:
    encoded = tokenizer(list(texts), padding=True, truncation=True, max_length=max_length, return_tensors="pt")
    batch = {key: value for key, value in encoded.items() if key in ("input_ids", "attention_mask", "token_type_ids")}
    return batch, batch["attention_mask"].bool()


def verify_conversion(
    converted: ConvertedCheckpoint, texts: Sequence[str], tolerance: float = VERIFICATION_TOLERANCE
) -> list[VerificationCheck]:
    """Runs the source and the converted model on real text, tokenized by the checkpoint's own tokenizer (float32,
    eval mode); `TokenizerError` first if that tokenizer does not tokenize `texts` (see `check_tokenizer_on_text`).

    1. the converted weights with `n = 1` against the source, inputs up to the source's N (the texts joined into one
       input reach it), with the model's attention kernel and with the other one (eager / sdpa) (< `tolerance`);
    2. the chosen configuration against the source on inputs shorter than a block (`L <= b`), reported only: heads
       with a shift > 0 see an empty partner block there and output zero, so the outputs differ from the source's;
    3. the chosen configuration on the same inputs against the `n = 1` model with those heads silenced, which is what
       it computes there (docs/attention.md) (< `tolerance`). For `"full"` this is the source itself; for
       `"sparse_fixed"` inputs are cut to `L <= sparse_stride`, where the fixed pattern is full attention.
    """
    check_tokenizer_on_text(converted, texts)
    model, source, tokenizer = converted.model, converted.source_model, converted.tokenizer
    config = model.config
    source_length = converted.source_sequence_length
    # One more input joins all texts, so that it is cut at the longest length of each check and every position is used.
    texts = list(texts) + [" ".join(texts)]
    checks = []

    def check(name, first, second, real, limit):
        checks.append(VerificationCheck(name, _max_difference(first, second, real), limit, real.sum(1).tolist()))

    one_block = with_blockwise_fields(
        model, num_blocks=1, heads_per_shift=[config.num_attention_heads], attention_pattern="blockwise"
    )
    batch, real = _batch(tokenizer, texts, source_length)
    source_outputs = _outputs(source, batch)
    check("n=1 vs source", _outputs(one_block, batch), source_outputs, real, tolerance)
    # The same with the other kernel: same math, other float operations (a bitwise-equal result above is no fluke).
    kernel = one_block.config._attn_implementation
    other_kernel = "sdpa" if kernel == "eager" else "eager"
    one_block.set_attn_implementation(other_kernel)
    check(f"n=1 ({other_kernel} kernel) vs source", _outputs(one_block, batch), source_outputs, real, tolerance)
    one_block.set_attn_implementation(kernel)

    silenced = []
    if config.attention_pattern == "blockwise":
        short_length = config.effective_block_size
        silenced = [head for head, shift in enumerate(config.head_shifts) if shift > 0]
        label = f"n={config.num_blocks} {config.heads_per_shift}, L <= b={config.effective_block_size}"
    elif config.attention_pattern == "sparse_fixed":
        short_length, label = config.sparse_stride, f"sparse_fixed, L <= l={config.sparse_stride}"
    else:
        short_length, label = source_length, "full attention"
    short_batch, short_real = _batch(tokenizer, texts, min(short_length, source_length))
    target_outputs = _outputs(model, short_batch)
    if silenced:
        check(
            f"{label}: vs source (reported; shift>0 heads output zero)",
            target_outputs,
            _outputs(source, short_batch),
            short_real,
            None,
        )
        reference = _silence_heads(one_block, silenced)
        check(
            f"{label}: vs n=1 with the {len(silenced)} shift>0 heads silenced",
            target_outputs,
            _outputs(reference, short_batch),
            short_real,
            tolerance,
        )
    else:
        check(f"{label}: vs source", target_outputs, _outputs(source, short_batch), short_real, tolerance)
    return checks
