"""Loading and checking the source checkpoint: its config, its architecture, its own tokenizer, and the BlockBERT
config built from it (`blockbert_config_from_source`).

RoBERTa and BERT are supported (`SOURCE_ARCHITECTURES`). A missing folder, an unreachable hub id, an unsupported
architecture or an option BlockBERT cannot honour raises a `ConversionError`; a source without a usable tokenizer of its
own raises a `TokenizerError`.
"""

import os
from collections.abc import Sequence

from transformers import (
    AutoConfig,
    AutoTokenizer,
    BertForMaskedLM,
    BertForPreTraining,
    BertModel,
    PreTrainedTokenizerBase,
    RobertaForMaskedLM,
    RobertaModel,
)

from ..model.configuration_blockbert import BlockBertConfig, default_heads_per_shift, parse_heads_per_shift
from ..tokenization import special_tokens_only
from .errors import ConversionError, TokenizerError


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


def check_source_config(source_config, copies_mlm_head: bool):
    """`ConversionError` for a source BlockBERT cannot reproduce: other positions, a decoder, a non-GELU BERT head."""
    position_type = getattr(source_config, "position_embedding_type", None) or "absolute"
    if position_type != "absolute":
        raise ConversionError(
            f"The source uses position_embedding_type={position_type!r}; BlockBERT has absolute learned positions only."
        )
    if getattr(source_config, "is_decoder", False) or getattr(source_config, "add_cross_attention", False):
        raise ConversionError(
            "The source is configured as a decoder (is_decoder / add_cross_attention); BlockBERT is an encoder only."
        )
    if source_config.model_type == "bert" and copies_mlm_head and source_config.hidden_act != "gelu":
        raise ConversionError(
            f"BERT's MLM head applies hidden_act={source_config.hidden_act!r}, BlockBERT's (RoBERTa's) head applies "
            "gelu: the head would compute something else. To keep only the encoder, convert with "
            "--target_class BlockBertModel --drop_source_keys cls."
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
    block_relative_positions: bool = False,
) -> BlockBertConfig:
    """The BlockBERT config of a converted checkpoint: the source's sizes, activation, epsilon, dropout, token types
    and special ids; RoBERTa or BERT positions; and the blockwise fields asked for.

    With `block_relative_positions` the source's position table is kept as it is (no rows added): positions restart
    at every block, `b` is `block_size` (at most the source's N) or the source's N, and `N = n * b`."""
    if num_blocks < 1:
        raise ConversionError(f"--num_blocks must be at least 1, got {num_blocks}.")
    source_length = source_sequence_length(source_config)
    if block_relative_positions:
        if block_size is not None and not 1 <= block_size <= source_length:
            raise ConversionError(
                f"--block_size {block_size} with --block_relative_positions: every token of a block gets its own "
                f"position from the source's table, which has {source_length}. Use 1 <= --block_size <= "
                f"{source_length}, or leave it out to get {source_length}."
            )
        blocks_of = source_length if block_size is None else block_size
        if max_seq_length is not None and max_seq_length != num_blocks * blocks_of:
            raise ConversionError(
                f"--max_seq_length {max_seq_length} with --block_relative_positions: N is num_blocks * block_size = "
                f"{num_blocks} * {blocks_of} = {num_blocks * blocks_of} and the position table is kept as it is. "
                "Leave --max_seq_length out and choose N with --num_blocks (and --block_size)."
            )
        max_seq_length = None  # the table stays the source's
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
            raise ConversionError(f"{error} (--heads_per_shift, e.g. --heads_per_shift {example})") from None
    try:
        heads_per_shift = parse_heads_per_shift(heads_per_shift)
    except ValueError as error:
        raise ConversionError(f"Invalid --heads_per_shift: {error}") from None
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
        heads_per_shift=heads_per_shift,
        attention_pattern=attention_pattern,
        position_embedding_style=style,
        block_relative_positions=block_relative_positions,
    )
    try:
        return BlockBertConfig(**fields)
    except ValueError as error:
        raise ConversionError(f"Invalid BlockBERT options: {error}") from None


def _tokenizer_hint(source: str, tokenizer_name_or_path: str | None) -> str:
    if tokenizer_name_or_path is None:
        return (
            "Copy the checkpoint's tokenizer files (e.g. vocab.txt or vocab.json + merges.txt, tokenizer_config.json) "
            f"into {source!r}, or pass the folder that holds them with --tokenizer_name PATH."
        )
    return "Pass the folder of the checkpoint's own tokenizer with --tokenizer_name PATH."


def load_source_tokenizer(source: str, tokenizer_name_or_path: str | None = None) -> PreTrainedTokenizerBase:
    """The checkpoint's own tokenizer: from `tokenizer_name_or_path` if given, else from the source folder.

    `TokenizerError` if none loads, or if what loads knows only its special tokens: transformers builds such a
    stand-in for a folder without tokenizer files (BERT's turns "hello world" into `[CLS] [UNK] [UNK] [SEP]`)."""
    name = tokenizer_name_or_path or source
    try:
        tokenizer = AutoTokenizer.from_pretrained(name)
    except (OSError, ValueError) as error:
        raise TokenizerError(
            f"Could not load a tokenizer from {name!r} ({str(error).splitlines()[0]}). "
            + _tokenizer_hint(source, tokenizer_name_or_path)
        ) from error
    problem = special_tokens_only(tokenizer)
    if problem:
        raise TokenizerError(
            f"{name!r} has no tokenizer vocabulary: {problem}. The conversion cannot be verified on real text with it, "
            "nor saved with a working tokenizer. " + _tokenizer_hint(source, tokenizer_name_or_path)
        )
    return tokenizer
