"""The tokenizer, the model and the batch geometry of a pre-training run."""

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from transformers import AutoTokenizer, PreTrainedTokenizerBase

from ..configuration_blockbert import BlockBertConfig, parse_heads_per_shift
from ..modeling_blockbert import BlockBertForMaskedLM
from ..saving import save_atomically
from ..tokenization import match_tokenizer_to_config, train_roberta_tokenizer
from .arguments import TOKENIZER_DIR, PretrainingArguments


def _paragraphs(documents: Iterable[str]) -> Iterator[str]:
    for document in documents:
        yield from document.split("\n")


def prepare_tokenizer(
    args: PretrainingArguments, documents: Sequence[str] | None, accelerator=None, trained_in: Path | None = None
) -> PreTrainedTokenizerBase:
    """The tokenizer named by `tokenizer_name` / `model_name_or_path`, or one trained on the training documents and
    saved to `output_dir/tokenizer` by the main process. A resumed run passes `trained_in`, the run folder of its
    checkpoint, and gets the tokenizer trained there: a fresh run never picks up one an earlier run left behind."""
    if args.tokenizer_name or args.model_name_or_path:
        return AutoTokenizer.from_pretrained(args.tokenizer_name or args.model_name_or_path)
    if not args.train_tokenizer_vocab_size:
        raise ValueError(
            "No tokenizer: pass --tokenizer_name FOLDER, --model_name_or_path FOLDER (with its "
            "tokenizer) or --train_tokenizer_vocab_size V to train one on the training files."
        )
    folder = Path(args.output_dir) / TOKENIZER_DIR
    if trained_in is not None and not (Path(trained_in) / TOKENIZER_DIR).is_dir():
        raise ValueError(f"Cannot resume: the run's trained tokenizer {Path(trained_in) / TOKENIZER_DIR} is missing.")
    if accelerator is None or accelerator.is_main_process:
        if trained_in is None:
            tokenizer = train_roberta_tokenizer(
                _paragraphs(documents), args.train_tokenizer_vocab_size, model_max_length=args.max_seq_length
            )
            save_atomically(folder, tokenizer.save_pretrained)
        elif Path(trained_in).resolve() != Path(args.output_dir).resolve():  # another run's checkpoint: keep a copy
            save_atomically(folder, AutoTokenizer.from_pretrained(Path(trained_in) / TOKENIZER_DIR).save_pretrained)
    if accelerator is not None:
        accelerator.wait_for_everyone()
    return AutoTokenizer.from_pretrained(folder)


def _blockwise_fields(args: PretrainingArguments) -> dict:
    fields = {key: getattr(args, key) for key in ("num_blocks", "heads_per_shift", "attention_pattern")}
    fields = {key: value for key, value in fields.items() if value is not None}
    if "heads_per_shift" in fields:
        fields["heads_per_shift"] = parse_heads_per_shift(fields["heads_per_shift"])
    return fields


def _optional_fields(args: PretrainingArguments, names: Iterable[str]) -> dict:
    return {name: getattr(args, name) for name in names if getattr(args, name) is not None}


def _config_from_checkpoint(args: PretrainingArguments) -> BlockBertConfig:
    """The checkpoint's config with the run's blockwise and dropout options (a new n re-derives b and the heads)."""
    config = BlockBertConfig.from_pretrained(args.model_name_or_path)
    blockwise = _blockwise_fields(args)
    dropout = _optional_fields(args, ("hidden_dropout_prob", "attention_probs_dropout_prob"))
    if blockwise or args.block_size is not None:
        new_n = "num_blocks" in blockwise
        block_size = args.block_size if args.block_size is not None else (None if new_n else config.block_size)
        if new_n and "heads_per_shift" not in blockwise:
            blockwise["heads_per_shift"] = None
        config = BlockBertConfig.from_dict({**config.to_dict(), **blockwise, "block_size": block_size, **dropout})
    elif dropout:
        config = BlockBertConfig.from_dict({**config.to_dict(), **dropout})
    if config.max_sequence_length != args.max_seq_length:
        raise ValueError(
            f"{args.model_name_or_path} has N = {config.max_sequence_length} but --max_seq_length is "
            f"{args.max_seq_length}; use --max_seq_length {config.max_sequence_length} (or convert the checkpoint "
            "to another N)."
        )
    return config


def _config_from_scratch(args: PretrainingArguments, tokenizer: PreTrainedTokenizerBase) -> BlockBertConfig:
    base = BlockBertConfig.from_pretrained(args.config_name).to_dict() if args.config_name else {}
    sizes = _optional_fields(args, ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size"))
    if "hidden_size" in sizes and "intermediate_size" not in sizes:
        sizes["intermediate_size"] = 4 * sizes["hidden_size"]
    dropout = _optional_fields(args, ("hidden_dropout_prob", "attention_probs_dropout_prob"))
    fields = {**base, **sizes, **dropout, **_blockwise_fields(args)}
    pad = tokenizer.pad_token_id
    roberta_positions = fields.get("position_embedding_style", "roberta") == "roberta"
    fields.update(
        vocab_size=len(tokenizer),
        pad_token_id=pad,
        bos_token_id=tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.cls_token_id,
        eos_token_id=tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.sep_token_id,
        max_position_embeddings=args.max_seq_length + (pad + 1 if roberta_positions else 0),
        block_size=args.block_size,
    )
    return BlockBertConfig.from_dict(fields) if base else BlockBertConfig(**fields)


def build_model(args: PretrainingArguments, tokenizer: PreTrainedTokenizerBase) -> BlockBertForMaskedLM:
    """From `model_name_or_path` (blockwise options override its config) or from scratch."""
    if args.model_name_or_path:
        model = BlockBertForMaskedLM.from_pretrained(args.model_name_or_path, config=_config_from_checkpoint(args))
    else:
        model = BlockBertForMaskedLM(_config_from_scratch(args, tokenizer))
    match_tokenizer_to_config(tokenizer, model.config)
    model.config.sparse_prediction = args.sparse_prediction
    model.set_attn_implementation(args.attn_implementation)
    return model


@dataclass
class BatchGeometry:
    """How `tokens_per_batch` is cut: global sequences per step, per process, per micro-batch."""

    sequences_per_step: int
    num_processes: int
    micro_batch: int
    accumulation_steps: int


def batch_geometry(tokens_per_batch: int, seq_len: int, num_processes: int, micro_batch: int) -> BatchGeometry:
    """Batches are fixed in tokens: `tokens_per_batch = B x N` gives `B` sequences per optimizer step, split over
    processes and gradient-accumulation micro-batches of `micro_batch` sequences."""
    if tokens_per_batch % seq_len:
        raise ValueError(
            f"tokens_per_batch={tokens_per_batch} is not a multiple of max_seq_length={seq_len}: the "
            f"batch is B x N sequences. Use e.g. {max(1, tokens_per_batch // seq_len) * seq_len}."
        )
    sequences = tokens_per_batch // seq_len
    per_pass = num_processes * micro_batch
    if sequences % per_pass:
        raise ValueError(
            f"B = tokens_per_batch / N = {sequences} sequences per step cannot be split into "
            f"{num_processes} process(es) x per_device_train_batch_size {micro_batch} x an integer number "
            f"of accumulation steps. Choose per_device_train_batch_size dividing "
            f"{sequences // num_processes if sequences % num_processes == 0 else sequences}."
        )
    return BatchGeometry(sequences, num_processes, micro_batch, sequences // per_pass)
