"""RoBERTa / BERT checkpoints -> BlockBERT (SPEC.md, "Positions and conversion").

`convert_checkpoint` loads a RoBERTa or BERT checkpoint with transformers, builds the matching BlockBERT config and
model, and copies the weights tensor for tensor: every source tensor must land in exactly one target tensor and every
target tensor must receive one, otherwise a `ConversionError` lists the keys left over. BlockBERT keeps RoBERTa's
parameter names, so RoBERTa keys map to themselves; BERT's `bert.*` becomes `roberta.*` and BERT's MLM head
(`cls.predictions.*`) becomes `lm_head.*`. A longer sequence length `N` fills the new position rows by repeating the
source's trained rows (as Longformer did). `verify_conversion` then runs source and target on real sentences and
`save_converted` writes everything atomically.
"""

import copy
import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import (
    AutoConfig,
    AutoTokenizer,
    BertForMaskedLM,
    BertForPreTraining,
    BertModel,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    RobertaForMaskedLM,
    RobertaModel,
)

from .configuration_blockbert import BlockBertConfig, default_heads_per_shift, parse_heads_per_shift
from .modeling_blockbert import BlockBertForMaskedLM, BlockBertModel, BlockBertPreTrainedModel
from .saving import atomic_directory
from .tokenization import match_tokenizer_to_config, read_text_lines


# model_type -> architecture name -> (transformers class, whether it has an MLM head)
SOURCE_ARCHITECTURES = {
    "roberta": {
        "RobertaModel": (RobertaModel, False),
        "RobertaForMaskedLM": (RobertaForMaskedLM, True),
    },
    "bert": {
        "BertModel": (BertModel, False),
        "BertForMaskedLM": (BertForMaskedLM, True),
        "BertForPreTraining": (BertForPreTraining, True),
    },
}
TARGET_CLASSES = {"BlockBertModel": BlockBertModel, "BlockBertForMaskedLM": BlockBertForMaskedLM}
# BERT's MLM head, in BlockBERT's (RoBERTa's) names.
BERT_MLM_HEAD_NAMES = {
    "cls.predictions.transform.dense.": "dense.",
    "cls.predictions.transform.LayerNorm.": "layer_norm.",
    "cls.predictions.decoder.": "decoder.",
    "cls.predictions.bias": "bias",
}
VERIFICATION_TOLERANCE = 1e-4  # SPEC item 3, real checkpoints
REPORT_FILE = "conversion_report.json"


class ConversionError(ValueError):
    """A checkpoint or option that cannot be converted; the message says what was wrong and what to do."""


@dataclass
class ConvertedCheckpoint:
    """The result of `convert_checkpoint`: the BlockBERT model (with weights), its tokenizer and what was done."""

    model: BlockBertPreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    source_model: PreTrainedModel
    source: str
    source_model_type: str
    source_architecture: str
    source_sequence_length: int
    # (source keys, target keys) per copied tensor; tied names share one entry.
    copied: list[tuple[list[str], list[str]]] = field(default_factory=list)
    extended: dict[str, tuple[list[int], list[int]]] = field(default_factory=dict)
    initialised: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def config(self) -> BlockBertConfig:
        return self.model.config


# ---------------------------------------------------------------------------------------------------------------------
# Loading the source
# ---------------------------------------------------------------------------------------------------------------------


def _looks_like_a_path(name: str) -> bool:
    """Hub ids are `name` or `owner/name`; anything else is meant as a local folder."""
    return name.startswith((".", "/", "~")) or name.count("/") > 1 or (os.sep != "/" and os.sep in name)


def load_source_config(name_or_path: str):
    """The source's config; a clear `ConversionError` for a missing folder or an unreachable hub id."""
    if not os.path.isdir(name_or_path) and _looks_like_a_path(name_or_path):
        raise ConversionError(f"Source checkpoint folder {name_or_path!r} does not exist.")
    try:
        return AutoConfig.from_pretrained(name_or_path)
    except OSError as error:
        if os.path.isdir(name_or_path):
            raise ConversionError(f"Could not read a transformers config.json in {name_or_path!r}: {error}") from error
        raise ConversionError(
            f"{name_or_path!r} is not a local folder, and loading it from the Hugging Face Hub failed (offline or no "
            f"such repository): {str(error).splitlines()[0]} Download the checkpoint (config.json, weights, tokenizer "
            "files) to a folder on a machine with access and pass that folder."
        ) from error
    except ValueError as error:  # e.g. a model_type transformers does not know
        raise ConversionError(f"Could not read the config of {name_or_path!r}: {error}") from error


def _supported_list() -> str:
    return "; ".join(f"{model_type}: {', '.join(archs)}" for model_type, archs in SOURCE_ARCHITECTURES.items())


def resolve_source_architecture(source_config, architecture: str | None = None) -> tuple[type, bool, str]:
    """(transformers class, has MLM head, architecture name) of the source; `ConversionError` if unsupported."""
    model_type = getattr(source_config, "model_type", None)
    if model_type not in SOURCE_ARCHITECTURES:
        raise ConversionError(
            f"Unknown architecture: model_type {model_type!r} cannot be converted. Supported are {_supported_list()}."
        )
    if architecture is None:
        architectures = getattr(source_config, "architectures", None) or []
        if len(architectures) != 1:
            raise ConversionError(
                f"The source config names architectures {architectures}; pass exactly one with --source_architecture "
                f"(one of {', '.join(SOURCE_ARCHITECTURES[model_type])})."
            )
        architecture = architectures[0]
    if architecture not in SOURCE_ARCHITECTURES[model_type]:
        raise ConversionError(
            f"Unknown architecture: {architecture!r} (model_type {model_type!r}) cannot be converted. Supported are "
            f"{_supported_list()}. A fine-tuned head (classification, QA, ...) has no BlockBERT counterpart in this "
            "converter: convert the base model and fine-tune BlockBERT instead."
        )
    source_class, has_mlm_head = SOURCE_ARCHITECTURES[model_type][architecture]
    return source_class, has_mlm_head, architecture


def _check_source_config(source_config, has_mlm_head: bool):
    position_type = getattr(source_config, "position_embedding_type", None) or "absolute"
    if position_type != "absolute":
        raise ConversionError(
            f"The source uses position_embedding_type={position_type!r}; BlockBERT has absolute learned positions only."
        )
    if getattr(source_config, "is_decoder", False) or getattr(source_config, "add_cross_attention", False):
        raise ConversionError(
            "The source is configured as a decoder (is_decoder / add_cross_attention); BlockBERT is an encoder only."
        )
    if source_config.model_type == "bert" and has_mlm_head and source_config.hidden_act != "gelu":
        raise ConversionError(
            f"BERT's MLM head applies hidden_act={source_config.hidden_act!r}, BlockBERT's (RoBERTa's) head applies "
            "gelu: the head would compute something else. Convert with --target_class BlockBertModel (and "
            "--drop_source_keys cls.) to keep only the encoder."
        )


def source_sequence_length(source_config) -> int:
    """`N` of the source: RoBERTa reserves `pad_token_id + 1` position rows, BERT none."""
    if source_config.model_type == "roberta":
        return source_config.max_position_embeddings - source_config.pad_token_id - 1
    return source_config.max_position_embeddings


def blockbert_config_from_source(
    source_config,
    *,
    max_seq_length: int | None = None,
    num_blocks: int = 2,
    heads_per_shift: str | Sequence[int] | None = None,
    attention_pattern: str = "blockwise",
    block_size: int | None = None,
) -> BlockBertConfig:
    """The BlockBERT config of a converted checkpoint: the source's sizes, activation, epsilon, dropout, token types
    and special ids; RoBERTa or BERT positions; and the blockwise fields asked for."""
    source_length = source_sequence_length(source_config)
    length = source_length if max_seq_length is None else max_seq_length
    if length < source_length:
        raise ConversionError(
            f"--max_seq_length {length} is smaller than the source's sequence length N = {source_length}: conversion "
            f"only keeps or extends positions. Use --max_seq_length >= {source_length}."
        )
    style = "roberta" if source_config.model_type == "roberta" else "bert"
    pad = source_config.pad_token_id
    if style == "roberta" and pad is None:
        raise ConversionError("The RoBERTa source config has no pad_token_id; RoBERTa positions need it.")
    max_positions = length + pad + 1 if style == "roberta" else length
    if heads_per_shift is None:
        try:
            heads_per_shift = default_heads_per_shift(source_config.num_attention_heads, num_blocks)
        except ValueError as error:
            example = f"{source_config.num_attention_heads - 1}:1"
            raise ConversionError(f"{error} (--heads, e.g. --heads {example})") from None
    fields = dict(
        vocab_size=source_config.vocab_size,
        hidden_size=source_config.hidden_size,
        num_hidden_layers=source_config.num_hidden_layers,
        num_attention_heads=source_config.num_attention_heads,
        intermediate_size=source_config.intermediate_size,
        hidden_act=source_config.hidden_act,
        hidden_dropout_prob=source_config.hidden_dropout_prob,
        attention_probs_dropout_prob=source_config.attention_probs_dropout_prob,
        max_position_embeddings=max_positions,
        type_vocab_size=source_config.type_vocab_size,
        initializer_range=source_config.initializer_range,
        layer_norm_eps=source_config.layer_norm_eps,
        pad_token_id=pad,
        bos_token_id=getattr(source_config, "bos_token_id", None),
        eos_token_id=getattr(source_config, "eos_token_id", None),
        classifier_dropout=getattr(source_config, "classifier_dropout", None),
        tie_word_embeddings=getattr(source_config, "tie_word_embeddings", True),
        num_blocks=num_blocks,
        block_size=block_size,
        heads_per_shift=parse_heads_per_shift(heads_per_shift),
        attention_pattern=attention_pattern,
        position_embedding_style=style,
    )
    try:
        return BlockBertConfig(**fields)
    except ValueError as error:
        raise ConversionError(f"Invalid BlockBERT options: {error}") from None


# ---------------------------------------------------------------------------------------------------------------------
# The weight mapping
# ---------------------------------------------------------------------------------------------------------------------


def map_source_key(key: str, model_type: str, has_mlm_head: bool) -> tuple[str, str] | None:
    """Where a source parameter goes, as `(part, name)`: part `"base"` with the name inside the base model
    (`embeddings.*`, `encoder.*`, `pooler.*`), or part `"lm_head"` with the name inside BlockBERT's LM head; None if
    BlockBERT has no place for it (e.g. BERT's next-sentence head `cls.seq_relationship.*`)."""
    base_prefix = "roberta." if model_type == "roberta" else "bert."
    if key.startswith(base_prefix):
        return "base", key[len(base_prefix) :]
    if model_type == "roberta" and key.startswith("lm_head."):
        return "lm_head", key[len("lm_head.") :]
    if model_type == "bert":
        for source_name, target_name in BERT_MLM_HEAD_NAMES.items():
            if key.startswith(source_name):
                return "lm_head", target_name + key[len(source_name) :]
    if not has_mlm_head and key.startswith(("embeddings.", "encoder.", "pooler.")):
        return "base", key  # a base model's own keys carry no prefix
    return None


def _target_key(part: str, name: str, target_is_mlm: bool) -> str:
    if part == "lm_head":
        return "lm_head." + name
    return ("roberta." if target_is_mlm else "") + name


def _tensor_groups(model: torch.nn.Module) -> list[list[str]]:
    """The model's parameters and persistent buffers, tied names grouped together (one group per tensor)."""
    groups: dict[int, list[str]] = {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        groups.setdefault(id(tensor), []).append(name)
    return list(groups.values())


def extend_position_embeddings(
    source_rows: torch.Tensor, target_rows: int, style: str, pad_token_id: int | None
) -> torch.Tensor:
    """SPEC: new position rows repeat the source's trained rows in sequence. RoBERTa keeps rows `0 .. pad` (the rows
    before the first real position) and repeats rows `pad + 1 ..`; BERT repeats rows `0 ..`."""
    reserved = pad_token_id + 1 if style == "roberta" else 0
    trained = source_rows[reserved:]
    needed = target_rows - reserved
    repeats = math.ceil(needed / trained.shape[0])
    return torch.cat([source_rows[:reserved], trained.repeat(repeats, 1)[:needed]], dim=0)


def _format_keys(keys: Sequence[str], limit: int = 40) -> str:
    shown = ", ".join(sorted(keys)[:limit])
    return shown + (f", ... ({len(keys)} in all)" if len(keys) > limit else "")


def convert_checkpoint(
    source: str,
    *,
    num_blocks: int = 2,
    heads_per_shift: str | Sequence[int] | None = None,
    max_seq_length: int | None = None,
    attention_pattern: str = "blockwise",
    block_size: int | None = None,
    target_class: str = "auto",
    drop_source_keys: Sequence[str] = (),
    source_architecture: str | None = None,
    tokenizer_name_or_path: str | None = None,
    seed: int = 0,
) -> ConvertedCheckpoint:
    """Builds the BlockBERT model of a RoBERTa/BERT checkpoint, weight for weight (see the module docstring).

    `target_class`: `"auto"` gives `BlockBertForMaskedLM` for a source with an MLM head and `BlockBertModel` otherwise;
    `"BlockBertForMaskedLM"` from a source without a head initialises the head (reported in `initialised`).
    `drop_source_keys`: prefixes of source keys that may be left out on purpose (e.g. `cls.seq_relationship.` for BERT's
    next-sentence head, `bert.pooler.` when the target has no pooler). Any other leftover is an error.
    """
    source_config = load_source_config(source)
    source_class, has_mlm_head, architecture = resolve_source_architecture(source_config, source_architecture)
    _check_source_config(source_config, has_mlm_head)
    config = blockbert_config_from_source(
        source_config,
        max_seq_length=max_seq_length,
        num_blocks=num_blocks,
        heads_per_shift=heads_per_shift,
        attention_pattern=attention_pattern,
        block_size=block_size,
    )
    if target_class == "auto":
        target_class = "BlockBertForMaskedLM" if has_mlm_head else "BlockBertModel"
    if target_class not in TARGET_CLASSES:
        raise ConversionError(f"target_class must be 'auto' or one of {sorted(TARGET_CLASSES)}, got {target_class!r}.")
    target_is_mlm = target_class == "BlockBertForMaskedLM"

    try:
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_name_or_path or source)
    except (OSError, ValueError) as error:
        raise ConversionError(
            f"Could not load a tokenizer from {tokenizer_name_or_path or source!r} ({str(error).splitlines()[0]}). "
            "Pass the folder of the checkpoint's tokenizer with --tokenizer."
        ) from error
    try:
        match_tokenizer_to_config(tokenizer, config)
    except ValueError as error:
        raise ConversionError(str(error)) from None

    source_model, info = source_class.from_pretrained(source, dtype=torch.float32, output_loading_info=True)
    source_model.eval()
    missing = set(info["missing_keys"])
    pooler_keys = {"pooler.dense.weight", "pooler.dense.bias"}
    if not has_mlm_head and missing == pooler_keys:
        source_model.pooler = None  # a base model saved without pooler: its pooler would be random, leave it out
        missing = set()
    unused = sorted(info["unexpected_keys"])  # tensors in the file the source architecture does not use
    unused_not_dropped = [key for key in unused if not key.startswith(tuple(drop_source_keys))]
    if missing or unused_not_dropped or info["mismatched_keys"]:
        hint = ""
        if unused_not_dropped:
            prefixes = sorted({key.rsplit(".", 1)[0] + "." for key in unused_not_dropped})
            hint = f" If leaving the unused tensors out is what you want, pass --drop_source_keys {' '.join(prefixes)}."
        raise ConversionError(
            f"{source!r} does not load one to one as {architecture}: missing "
            f"{_format_keys(sorted(missing)) or 'none'}; "
            f"in the checkpoint but unused by {architecture}: {_format_keys(unused_not_dropped) or 'none'}; "
            f"mismatched {_format_keys(sorted(map(str, info['mismatched_keys']))) or 'none'}. Missing tensors would "
            f"convert random weights: pass the right architecture with --source_architecture.{hint}"
        )
    source_has_pooler = any(key.split(".")[-3:-2] == ["pooler"] for key in source_model.state_dict())

    torch.manual_seed(seed)  # only an initialised head (see `initialised`) depends on it
    if target_is_mlm:
        model = BlockBertForMaskedLM(config)
    else:
        model = BlockBertModel(config, add_pooling_layer=source_has_pooler)
    model.eval()

    result = ConvertedCheckpoint(
        dropped=unused,
        model=model,
        tokenizer=tokenizer,
        source_model=source_model,
        source=source,
        source_model_type=source_config.model_type,
        source_architecture=architecture,
        source_sequence_length=source_sequence_length(source_config),
    )
    _copy_weights(result, has_mlm_head, target_is_mlm, drop_source_keys)
    if target_is_mlm and not has_mlm_head:
        result.notes.append(
            f"{architecture} has no MLM head: BlockBertForMaskedLM's head was initialised (seed {seed}): "
            f"{', '.join(result.initialised)}. Pre-train it before using its predictions."
        )
    return result


def _copy_weights(result: ConvertedCheckpoint, has_mlm_head: bool, target_is_mlm: bool, drop: Sequence[str]):
    source_model, model, config = result.source_model, result.model, result.model.config
    source_state = source_model.state_dict()
    target_state = model.state_dict()
    target_group_of = {name: tuple(group) for group in _tensor_groups(model) for name in group}

    unmapped, mapped = [], {}  # mapped: target group -> list of source groups
    for source_group in _tensor_groups(source_model):
        targets = set()
        for key in source_group:
            where = map_source_key(key, result.source_model_type, has_mlm_head)
            target_key = _target_key(*where, target_is_mlm) if where else None
            if target_key is not None and target_key in target_group_of:
                targets.add(target_group_of[target_key])
        if not targets:
            if any(key.startswith(prefix) for key in source_group for prefix in drop):
                result.dropped.extend(source_group)
            else:
                unmapped.extend(source_group)
            continue
        if len(targets) > 1:
            raise ConversionError(
                f"Source tensor {source_group} would land in {len(targets)} different target tensors "
                f"{sorted(targets)}: the source ties weights that BlockBERT keeps apart (tie_word_embeddings?)."
            )
        mapped.setdefault(targets.pop(), []).append(source_group)

    twice = {target: sources for target, sources in mapped.items() if len(sources) > 1}
    if twice:
        raise ConversionError(f"Several source tensors map to the same target tensor: {twice}.")
    target_leftover = [name for group in set(target_group_of.values()) if group not in mapped for name in group]
    initialisable = target_is_mlm and not has_mlm_head
    if initialisable:
        result.initialised = sorted(name for name in target_leftover if name.startswith("lm_head."))
        target_leftover = [name for name in target_leftover if not name.startswith("lm_head.")]
    if unmapped or target_leftover:
        hints = []
        if unmapped:
            prefixes = sorted({key.rsplit(".", 1)[0] + "." for key in unmapped})
            pooler_hint = (
                " (or --target_class BlockBertModel to keep a pooler)"
                if any("pooler" in key for key in unmapped)
                else ""
            )
            hints.append(
                f"source tensors with no place in {type(model).__name__}: {_format_keys(unmapped)}. If leaving them "
                f"out is what you want, pass --drop_source_keys {' '.join(prefixes)}{pooler_hint}"
            )
        if target_leftover:
            hints.append(f"target tensors that no source tensor fills: {_format_keys(target_leftover)}")
        raise ConversionError("The weights do not map one to one: " + "; ".join(hints) + ".")

    style, pad = config.position_embedding_style, config.pad_token_id
    with torch.no_grad():
        for target_group, (source_group,) in mapped.items():
            source_tensor = source_state[source_group[0]]
            target_tensor = target_state[target_group[0]]
            if source_tensor.shape != target_tensor.shape:
                is_positions = target_group[0].endswith("position_embeddings.weight")
                if is_positions and source_tensor.shape[1:] == target_tensor.shape[1:]:
                    result.extended[target_group[0]] = (list(source_tensor.shape), list(target_tensor.shape))
                    source_tensor = extend_position_embeddings(source_tensor, target_tensor.shape[0], style, pad)
                else:
                    raise ConversionError(
                        f"Shape mismatch: source {source_group[0]} {tuple(source_tensor.shape)} vs target "
                        f"{target_group[0]} {tuple(target_tensor.shape)}."
                    )
            target_tensor.copy_(source_tensor.to(target_tensor.dtype))
            result.copied.append((sorted(source_group), sorted(target_group)))


# ---------------------------------------------------------------------------------------------------------------------
# Verification
# ---------------------------------------------------------------------------------------------------------------------


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
    lines = [line for line in read_text_lines(str(path)) if not line.startswith("=")]
    if not lines:
        raise ConversionError(f"{path} has no text lines to verify the conversion with.")
    return lines[:count]


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
    output projection are zeroed): what SPEC item 3 says a blockwise model computes for inputs of `L <= b` tokens."""
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
    """Runs the source and the converted model on real sentences (float32, eval mode):

    1. the converted weights with `n = 1` against the source, inputs up to the source's N (the texts joined into one
       input reach it), with the model's attention kernel and with the other one (eager / sdpa) (SPEC item 3: < 1e-4);
    2. the chosen configuration against the source on inputs shorter than a block (`L <= b`), reported only: heads
       with a shift > 0 see an empty partner block there and output zero, so the outputs differ from the source's;
    3. the chosen configuration on the same inputs against the `n = 1` model with those heads silenced, which is what
       SPEC says it computes (< 1e-4). For `"full"` this is the source itself; for `"sparse_fixed"` inputs are cut to
       `L <= sparse_stride`, where the fixed pattern is full attention.
    """
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
        short_length = config.block_size
        silenced = [head for head, shift in enumerate(config.head_shifts) if shift > 0]
        label = f"n={config.num_blocks} {config.heads_per_shift}, L <= b={config.block_size}"
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


# ---------------------------------------------------------------------------------------------------------------------
# Report and saving
# ---------------------------------------------------------------------------------------------------------------------


def conversion_summary(converted: ConvertedCheckpoint, checks: Sequence[VerificationCheck] | None) -> dict:
    config = converted.config
    summary = {
        "source": str(converted.source),
        "source_model_type": converted.source_model_type,
        "source_architecture": converted.source_architecture,
        "target_class": type(converted.model).__name__,
        "parameters": converted.model.num_parameters(),
        "source_sequence_length": converted.source_sequence_length,
        "sequence_length": config.max_sequence_length,
        "num_blocks": config.num_blocks,
        "block_size": config.block_size,
        "heads_per_shift": config.heads_per_shift,
        "attention_pattern": config.attention_pattern,
        "position_embedding_style": config.position_embedding_style,
        "hidden_act": config.hidden_act,
        "layer_norm_eps": config.layer_norm_eps,
        "type_vocab_size": config.type_vocab_size,
        "pad_token_id": config.pad_token_id,
        "tensors_copied": len(converted.copied),
        "extended": converted.extended,
        "initialised": converted.initialised,
        "dropped": converted.dropped,
        "notes": converted.notes,
    }
    if checks is not None:
        summary["verification"] = [
            {
                "check": c.name,
                "max_abs_diff": c.max_abs_diff,
                "tolerance": c.tolerance,
                "passed": c.passed,
                "lengths": c.lengths,
            }
            for c in checks
        ]
    return summary


def format_report(summary: dict) -> str:
    s = summary
    extended = "".join(f"; {name} {src} -> {dst} (rows repeated)" for name, (src, dst) in s["extended"].items())
    lines = [
        f"source: {s['source']} ({s['source_model_type']}, {s['source_architecture']})",
        f"target: {s['target_class']}, {s['parameters']:,} parameters, {s['position_embedding_style']} positions, "
        f"hidden_act {s['hidden_act']}, layer_norm_eps {s['layer_norm_eps']}, type_vocab_size {s['type_vocab_size']}, "
        f"pad id {s['pad_token_id']}",
        f"N: {s['source_sequence_length']} -> {s['sequence_length']}; n = {s['num_blocks']} blocks of "
        f"b = {s['block_size']}, heads per shift {s['heads_per_shift']}, attention_pattern {s['attention_pattern']}",
        f"tensors: {s['tensors_copied']} copied one to one{extended}",
    ]
    if summary["dropped"]:
        lines.append(f"dropped on request: {', '.join(summary['dropped'])}")
    lines.extend(f"note: {note}" for note in summary["notes"])
    for check in summary.get("verification", []):
        verdict = "reported" if check["tolerance"] is None else ("PASS" if check["passed"] else "FAIL")
        limit = "" if check["tolerance"] is None else f" (limit {check['tolerance']:.0e})"
        lines.append(
            f"verify {check['check']}: max |diff| = {check['max_abs_diff']:.2e}{limit} {verdict}; "
            f"{len(check['lengths'])} inputs of {min(check['lengths'])}-{max(check['lengths'])} tokens"
        )
    return "\n".join(lines)


def save_converted(
    converted: ConvertedCheckpoint, output_dir: str | os.PathLike, summary: dict, overwrite: bool = False
) -> Path:
    """Writes model (weights, config, code for `trust_remote_code`), tokenizer (`model_max_length = N`) and
    `conversion_report.json` into one atomic folder; the folder is reloaded first to check the saved weights."""
    output_dir = Path(output_dir)
    if output_dir.exists() and any(output_dir.iterdir()) and not overwrite:
        raise ConversionError(f"{output_dir} exists and is not empty; pass --overwrite to replace it.")
    model = converted.model
    with atomic_directory(output_dir) as staging:
        model.save_pretrained(staging)
        converted.tokenizer.save_pretrained(staging)
        (staging / REPORT_FILE).write_text(json.dumps(summary, indent=2) + "\n")
        kwargs = {"add_pooling_layer": model.pooler is not None} if isinstance(model, BlockBertModel) else {}
        reloaded = type(model).from_pretrained(staging, **kwargs)
        expected = model.state_dict()
        for name, tensor in reloaded.state_dict().items():
            if not torch.equal(tensor, expected[name]):
                raise ConversionError(f"The saved checkpoint does not reload {name} unchanged; nothing was written.")
    return output_dir


__all__ = [
    "ConversionError",
    "ConvertedCheckpoint",
    "VerificationCheck",
    "blockbert_config_from_source",
    "conversion_summary",
    "convert_checkpoint",
    "extend_position_embeddings",
    "format_report",
    "map_source_key",
    "sample_sentences",
    "save_converted",
    "verify_conversion",
]
