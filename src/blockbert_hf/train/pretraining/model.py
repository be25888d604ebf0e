"""The tokenizer, the model and the batch geometry of a pre-training run."""

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

from transformers import AutoTokenizer, PreTrainedTokenizerBase

from ...model.configuration_blockbert import BLOCK_SIZE_SET_BY_USER, BlockBertConfig, parse_heads_per_shift
from ...model.modeling_blockbert import BlockBertForMaskedLM
from ...saving import save_atomically, save_tokenizer
from ...tokenization import match_tokenizer_to_config, train_roberta_tokenizer
from .arguments import DEFAULT_N, TOKENIZER_DIR, PretrainingArguments


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
            save_atomically(folder, partial(save_tokenizer, tokenizer))
        elif Path(trained_in).resolve() != Path(args.output_dir).resolve():  # another run's checkpoint: keep a copy
            trained_tokenizer = AutoTokenizer.from_pretrained(Path(trained_in) / TOKENIZER_DIR)
            save_atomically(folder, partial(save_tokenizer, trained_tokenizer))
    if accelerator is not None:
        accelerator.wait_for_everyone()
    return AutoTokenizer.from_pretrained(folder)


def _blockwise_fields(args: PretrainingArguments) -> dict:
    fields = {key: getattr(args, key) for key in ("num_blocks", "heads_per_shift", "attention_pattern")}
    fields = {key: value for key, value in fields.items() if value is not None}
    if args.block_relative_positions:
        fields["block_relative_positions"] = True
    if "heads_per_shift" in fields:
        fields["heads_per_shift"] = parse_heads_per_shift(fields["heads_per_shift"])
    return fields


def _optional_fields(args: PretrainingArguments, names: Iterable[str]) -> dict:
    return {name: getattr(args, name) for name in names if getattr(args, name) is not None}


def with_sequence_length(args: PretrainingArguments) -> PretrainingArguments:
    """`args` with `max_seq_length` set: as given, else the N of `--model_name_or_path` with the run's blockwise
    options (as `run_qa` takes the model's N), else `DEFAULT_N` from scratch."""
    if args.max_seq_length is not None:
        return args
    if args.model_name_or_path:
        return replace(args, max_seq_length=_checkpoint_config(args).max_sequence_length)
    return replace(args, max_seq_length=DEFAULT_N)


def config_from_checkpoint(args: PretrainingArguments) -> BlockBertConfig:
    """The checkpoint's config with the run's blockwise and dropout options (a new n, or positions that now restart at
    every block, re-derive b; a new n the heads). Raises a `ValueError` when they do not give N = `max_seq_length`."""
    config = _checkpoint_config(args)
    _check_sequence_length(config, args, args.model_name_or_path)
    return config


def _checkpoint_config(args: PretrainingArguments) -> BlockBertConfig:
    config = BlockBertConfig.from_pretrained(args.model_name_or_path)
    blockwise = _blockwise_fields(args)
    dropout = _optional_fields(args, ("hidden_dropout_prob", "attention_probs_dropout_prob"))
    if blockwise or args.block_size is not None:
        new_n = "num_blocks" in blockwise
        rederive = new_n or (args.block_relative_positions and not config.block_relative_positions)
        block_size = args.block_size if args.block_size is not None else (None if rederive else config.block_size)
        if new_n and "heads_per_shift" not in blockwise:
            blockwise["heads_per_shift"] = None
        fields = {**config.to_dict(), **blockwise, "block_size": block_size, **dropout}
        fields[BLOCK_SIZE_SET_BY_USER] = block_size is not None  # a given b is kept even where it equals ceil(N / n)
        config = BlockBertConfig.from_dict(fields)
    elif dropout:
        config = BlockBertConfig.from_dict({**config.to_dict(), **dropout})
    return config


def _check_sequence_length(config: BlockBertConfig, args: PretrainingArguments, source: str) -> None:
    if config.max_sequence_length == args.max_seq_length:
        return
    rows, wanted = config.position_rows, args.max_seq_length
    if config.block_relative_positions:
        how = f"{config.num_blocks} blocks of {config.effective_block_size}, positions restarting in each"
    else:
        how = f"its {rows} position rows"
    hint = "convert the checkpoint to another N"
    if not config.block_relative_positions and wanted > rows and wanted % rows == 0:
        hint = (
            f"for N = {wanted} as {wanted // rows} blocks of {rows}: --block_relative_positions --num_blocks "
            f"{wanted // rows} --attention_pattern blockwise"
        )
    raise ValueError(
        f"{source} has N = {config.max_sequence_length} but --max_seq_length is {wanted} (N is {how}); use "
        f"--max_seq_length {config.max_sequence_length} (or {hint})."
    )


def _config_from_scratch(args: PretrainingArguments, tokenizer: PreTrainedTokenizerBase) -> BlockBertConfig:
    base = BlockBertConfig.from_pretrained(args.config_name).to_dict() if args.config_name else {}
    sizes = _optional_fields(args, ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size"))
    if "hidden_size" in sizes and "intermediate_size" not in sizes:
        sizes["intermediate_size"] = 4 * sizes["hidden_size"]
    dropout = _optional_fields(args, ("hidden_dropout_prob", "attention_probs_dropout_prob"))
    fields = {**base, **sizes, **dropout, **_blockwise_fields(args)}
    pad = tokenizer.pad_token_id
    roberta_positions = fields.get("position_embedding_style", "roberta") == "roberta"
    rows = args.max_seq_length
    if fields.get("block_relative_positions"):  # a position row per token of a block: b rows, N = n x b
        rows = args.block_size or math.ceil(args.max_seq_length / fields.get("num_blocks", BlockBertConfig.num_blocks))
    fields.update(
        vocab_size=len(tokenizer),
        pad_token_id=pad,
        bos_token_id=tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.cls_token_id,
        eos_token_id=tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.sep_token_id,
        max_position_embeddings=rows + (pad + 1 if roberta_positions else 0),
        block_size=args.block_size,
    )
    config = BlockBertConfig.from_dict(fields) if base else BlockBertConfig(**fields)
    _check_sequence_length(config, args, "The model the options describe")
    return config


class _StandInTokenizer:
    """What `_config_from_scratch` reads of a tokenizer, before the run's exists: RoBERTa's special token ids (neither
    they nor the vocabulary size change which model options are valid)."""

    pad_token_id, bos_token_id, eos_token_id, cls_token_id, sep_token_id = 1, 0, 2, 0, 2

    def __len__(self) -> int:
        return 50265


def check_model_options(args: PretrainingArguments) -> None:
    """Refuses, before any work, options that contradict each other or the checkpoint: what to freeze without a
    checkpoint to keep it from, and blockwise overrides that do not give N = `max_seq_length` (read from a local
    checkpoint's config; a Hub checkpoint is checked when it loads)."""
    if not args.model_name_or_path:
        for option in ("train_only_mlm_head", "freeze_word_embeddings"):
            if getattr(args, option):
                raise ValueError(
                    f"--{option} keeps weights of --model_name_or_path as they are, but the run starts from scratch, "
                    "where they would stay randomly initialised: pass --model_name_or_path FOLDER, or leave "
                    f"--{option} out."
                )
        _config_from_scratch(args, _StandInTokenizer())  # sizes, heads and blocks of a model from scratch
    elif Path(args.model_name_or_path).is_dir():
        config_from_checkpoint(args)
    if (
        args.eval_before_training
        and args.train_files
        and not (args.validation_files or args.validation_split_percentage)
    ):
        raise ValueError(
            "--eval_before_training evaluates on held-out text, but the run has none: pass --validation_files or "
            "--validation_split_percentage."
        )


def freeze_parameters(model: BlockBertForMaskedLM, args: PretrainingArguments) -> dict:
    """Freezes what the run keeps as the checkpoint has it (`train_only_mlm_head`: the whole encoder;
    `freeze_word_embeddings`: the word embeddings), before the optimizer is built; returns what trains, for
    `results.json` and the model card. The decoder weight tied to the word embeddings is the same tensor: frozen with
    them."""
    if args.train_only_mlm_head:
        model.roberta.requires_grad_(False)
    elif args.freeze_word_embeddings:
        model.get_input_embeddings().requires_grad_(False)
    return trained_parameters(model)


def trained_parameters(model: BlockBertForMaskedLM) -> dict:
    """Which parameters train, in words (`trained_parameters`), and how many (`trainable_parameters`)."""
    embeddings = model.get_input_embeddings().weight
    tied = model.get_output_embeddings().weight is embeddings
    if not any(parameter.requires_grad for parameter in model.roberta.parameters()):
        if tied:
            text = "the MLM head only (dense layer, layer norm, output bias); the encoder frozen, with the word "
            text += "embeddings and the decoder weight tied to them"
        else:
            text = "the MLM head only (dense layer, layer norm, decoder, output bias); the encoder frozen"
    elif not embeddings.requires_grad:
        text = "every parameter but the word embeddings" + (" and the decoder weight tied to them" if tied else "")
    else:
        text = "every parameter"
    trainable = sum(parameter.numel() for parameter in model.parameters() if parameter.requires_grad)
    return {"trained_parameters": text, "trainable_parameters": trainable}


def build_model(args: PretrainingArguments, tokenizer: PreTrainedTokenizerBase) -> BlockBertForMaskedLM:
    """From `model_name_or_path` (blockwise options override its config) or from scratch."""
    if args.model_name_or_path:
        model = BlockBertForMaskedLM.from_pretrained(args.model_name_or_path, config=config_from_checkpoint(args))
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
