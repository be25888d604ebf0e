"""The weight-for-weight copy of a RoBERTa or BERT checkpoint into BlockBERT (`convert_checkpoint`).

Every source tensor must land in exactly one target tensor and every target tensor must receive one, otherwise a
`ConversionError` lists the keys left over. BlockBERT keeps RoBERTa's parameter names, so RoBERTa keys map to
themselves; BERT's `bert.*` becomes `roberta.*` and BERT's MLM head (`cls.predictions.*`) becomes `lm_head.*`. A longer
sequence length `N` fills the new position rows by repeating the source's trained rows (as Longformer did); with
block-relative positions the table is copied as it is.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ..model.configuration_blockbert import BlockBertConfig
from ..model.modeling_blockbert import BlockBertForMaskedLM, BlockBertModel, BlockBertPreTrainedModel
from ..tokenization import match_tokenizer_to_config
from .errors import ConversionError
from .source import (
    blockbert_config_from_source,
    check_source_config,
    load_source_config,
    load_source_tokenizer,
    resolve_source_architecture,
    source_sequence_length,
)


TARGET_CLASSES = {"BlockBertModel": BlockBertModel, "BlockBertForMaskedLM": BlockBertForMaskedLM}
# BERT's MLM head, in BlockBERT's (RoBERTa's) names.
BERT_MLM_HEAD_NAMES = {
    "cls.predictions.transform.dense.": "dense.",
    "cls.predictions.transform.LayerNorm.": "layer_norm.",
    "cls.predictions.decoder.": "decoder.",
    "cls.predictions.bias": "bias",
}


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
    tokenizer_source: str  # where `tokenizer` was loaded from: the source, or the tokenizer passed for it
    # (source keys, target keys) per copied tensor; tied names share one entry.
    copied: list[tuple[list[str], list[str]]] = field(default_factory=list)
    extended: dict[str, tuple[list[int], list[int]]] = field(default_factory=dict)
    initialised: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def config(self) -> BlockBertConfig:
        return self.model.config


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
    """New position rows repeat the source's trained rows in sequence. RoBERTa keeps rows `0 .. pad` (the rows
    before the first real position) and repeats rows `pad + 1 ..`; BERT repeats rows `0 ..`."""
    reserved = pad_token_id + 1 if style == "roberta" else 0
    trained = source_rows[reserved:]
    needed = target_rows - reserved
    repeats = math.ceil(needed / trained.shape[0])
    return torch.cat([source_rows[:reserved], trained.repeat(repeats, 1)[:needed]], dim=0)


def _drop_prefixes(leftover: Sequence[str], already_dropped: Sequence[str]) -> str:
    """The complete `--drop_source_keys` value that leaves out `leftover` too (the flag takes all prefixes at once)."""
    return " ".join(dict.fromkeys([*already_dropped, *sorted({key.rsplit(".", 1)[0] + "." for key in leftover})]))


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
    block_relative_positions: bool = False,
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
    `tokenizer_name_or_path`: the checkpoint's tokenizer, where the source folder has none (see
    `load_source_tokenizer`); it is used for verification and saved with the model.
    `block_relative_positions`: positions restart at every block; the source's position table is copied as it is (no
    rows added) and `N = n * b` (see `blockbert_config_from_source`).
    """
    source_config = load_source_config(source)
    source_class, has_mlm_head, architecture = resolve_source_architecture(source_config, source_architecture)
    if target_class == "auto":
        target_class = "BlockBertForMaskedLM" if has_mlm_head else "BlockBertModel"
    if target_class not in TARGET_CLASSES:
        raise ConversionError(f"target_class must be 'auto' or one of {sorted(TARGET_CLASSES)}, got {target_class!r}.")
    target_is_mlm = target_class == "BlockBertForMaskedLM"
    check_source_config(source_config, copies_mlm_head=has_mlm_head and target_is_mlm)
    config = blockbert_config_from_source(
        source_config,
        max_seq_length=max_seq_length,
        num_blocks=num_blocks,
        heads_per_shift=heads_per_shift,
        attention_pattern=attention_pattern,
        block_size=block_size,
        block_relative_positions=block_relative_positions,
    )

    tokenizer = load_source_tokenizer(source, tokenizer_name_or_path)
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
            prefixes = _drop_prefixes(unused_not_dropped, drop_source_keys)
            hint = f" If leaving the unused tensors out is what you want, pass --drop_source_keys {prefixes}."
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
        tokenizer_source=tokenizer_name_or_path or source,
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
            prefixes = _drop_prefixes(unmapped, drop)
            pooler_hint = (
                " (or --target_class BlockBertModel to keep a pooler)"
                if any("pooler" in key for key in unmapped)
                else ""
            )
            hints.append(
                f"source tensors with no place in {type(model).__name__}: {_format_keys(unmapped)}. If leaving them "
                f"out is what you want, pass --drop_source_keys {prefixes}{pooler_hint}"
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
