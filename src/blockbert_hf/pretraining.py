"""Masked-language-model pre-training of BlockBERT with Accelerate (`examples/run_mlm.py`).

Pipeline:

1. **Documents.** Local `.txt` / `.txt.gz` / `.jsonl` files or a hub dataset become a list of documents
   (`read_documents`). How a document ends is `document_boundary`:
   - `"file"`: a whole `.txt` file is one document (a book); each `.jsonl` record / hub row is one document;
   - `"blank_line"`: blank lines separate documents;
   - `"heading"`: a line matching `document_heading_regex` starts a new document (default: WikiText's article titles
     ` = Title = `); every file also starts a new one. `.jsonl` records and hub rows are then read as lines.
   Inside a document, consecutive non-blank lines are joined with spaces into paragraphs (undoing hard line wraps)
   and paragraphs are joined with newlines.
2. **Packing** like RoBERTa's DOC-SENTENCES (`pack_documents`): each sequence takes the next `N - 2` tokens of the
   current document between `<s>` and `</s>` (the tokenizer's own special tokens); a sequence ends early only where
   its document ends, so no sequence ever mixes two documents. (Unlike fairseq's `complete_doc`, a sentence may be cut
   at a sequence edge: every sequence but a document's last is full, so a batch holds about `B x N` real tokens.)
3. **Masking** with `DataCollatorForLanguageModeling` (15 %, 80/10/10), seeded per sequence (`MaskingCollator`): the
   mask of a sequence depends only on (seed, epoch, sequence id), not on the process count, the batch it lands in or
   a resume, so a 2-process run and a resumed run see the very same masks as a 1-process uninterrupted run.
   Validation masks use `VALIDATION_SEED` instead of the run's seed, so runs with other seeds score the same tokens.
4. **Batches** are fixed in tokens: `tokens_per_batch = B x N` (the paper's 131,072) gives `B` sequences per optimizer
   step, split over processes and gradient-accumulation micro-batches of `per_device_train_batch_size`. The loss of a
   step is the mean over *all* masked tokens of the global batch (summed cross-entropy divided by the global count),
   so 1 process x k micro-batches and k processes x 1 micro-batch compute the same gradient.
5. **Training**: AdamW (0.9, 0.999, eps 1e-8, weight decay 0.01 except biases and LayerNorm), peak lr 2.5e-4, linear
   warmup and decay (`get_linear_schedule_with_warmup`), gradient clipping at 1.0, mixed precision via Accelerate.
   Dropout is seeded per (seed, step, process), so it too is the same after a resume.
6. **Checkpoints** every K steps: `Accelerator.save_state` (model, optimizer, scheduler, RNG states) plus
   `trainer_state.json` (step, epoch, data position, counters), written into one atomic folder
   `output_dir/checkpoints/step_K`. `resume_from_checkpoint="latest"` continues from the newest complete one.
7. **Metrics**: `metrics.jsonl` (and TensorBoard if installed), validation loss and perplexity (masked tokens, fixed
   masks), tokens per second; the final model and tokenizer go to `output_dir/final_model`, a summary to
   `results.json`.
"""

import contextlib
import functools
import hashlib
import importlib.util
import json
import math
import os
import re
import shutil
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from torch.utils.data import DataLoader
from tqdm.auto import tqdm
from transformers import (
    AutoTokenizer,
    DataCollatorForLanguageModeling,
    PreTrainedTokenizerBase,
    get_linear_schedule_with_warmup,
)
from transformers.utils import logging

from .configuration_blockbert import BlockBertConfig, parse_heads_per_shift
from .modeling_blockbert import BlockBertForMaskedLM
from .saving import atomic_directory, open_text, save_atomically
from .tokenization import match_tokenizer_to_config, train_roberta_tokenizer


logger = logging.get_logger(__name__)

DOCUMENT_BOUNDARIES = ("file", "blank_line", "heading")
WIKITEXT_HEADING = r"^= [^=].* =$"  # " = Robert Boulter = " (stripped); "= = Career = =" is a section, not a document
CHECKPOINTS_DIR = "checkpoints"
TRAINER_STATE = "trainer_state.json"
METRICS_FILE = "metrics.jsonl"
RESULTS_FILE = "results.json"


@dataclass
class PretrainingArguments:
    """Options of `examples/run_mlm.py` (parsed with `transformers.HfArgumentParser`)."""

    output_dir: str = field(metadata={"help": "checkpoints/, metrics.jsonl, results.json, final_model/, tokenizer/"})
    # ---- data
    train_files: list[str] | None = field(default=None, metadata={"help": "local .txt, .txt.gz or .jsonl files"})
    validation_files: list[str] | None = field(default=None, metadata={"help": "held-out files (same formats)"})
    dataset_name: str | None = field(default=None, metadata={"help": "hub dataset (needs network or a local cache)"})
    dataset_config_name: str | None = None
    text_column: str = field(default="text", metadata={"help": "text field of .jsonl records / hub rows"})
    document_boundary: str = field(default="file", metadata={"help": "file | blank_line | heading (see module doc)"})
    document_heading_regex: str = field(
        default=WIKITEXT_HEADING, metadata={"help": "with document_boundary=heading: a line that starts a document"}
    )
    validation_split_percentage: float = field(
        default=0.0, metadata={"help": "hold out this % of the training documents when there are no validation files"}
    )
    max_eval_sequences: int | None = field(default=None, metadata={"help": "evaluate on the first K packed sequences"})
    # ---- tokenizer and model
    tokenizer_name: str | None = field(default=None, metadata={"help": "tokenizer folder (default: the model's)"})
    train_tokenizer_vocab_size: int | None = field(
        default=None, metadata={"help": "train a byte-level BPE tokenizer of this size on the training documents"}
    )
    model_name_or_path: str | None = field(default=None, metadata={"help": "BlockBERT checkpoint to start from"})
    config_name: str | None = field(default=None, metadata={"help": "BlockBERT config (json/folder) for from scratch"})
    max_seq_length: int = field(default=512, metadata={"help": "N"})
    num_hidden_layers: int | None = None
    hidden_size: int | None = None
    num_attention_heads: int | None = None
    intermediate_size: int | None = field(default=None, metadata={"help": "default 4 x hidden_size"})
    hidden_dropout_prob: float | None = None
    attention_probs_dropout_prob: float | None = None
    num_blocks: int | None = field(default=None, metadata={"help": "n"})
    block_size: int | None = field(default=None, metadata={"help": "b (default ceil(N / n))"})
    heads_per_shift: str | None = field(default=None, metadata={"help": "paper notation, e.g. 10:2 or 8:2:2"})
    attention_pattern: str | None = field(default=None, metadata={"help": "blockwise | full | sparse_fixed"})
    attn_implementation: str = field(default="sdpa", metadata={"help": "attention kernel: eager | sdpa"})
    sparse_prediction: bool = field(
        default=True,
        metadata={
            "help": "run the MLM head on the masked positions only while training (same loss, "
            "about 30% faster at hidden 256 / vocab 8k); the saved model has it off"
        },
    )
    # ---- batch and schedule
    tokens_per_batch: int = field(default=131072, metadata={"help": "B x N per optimizer step (paper: 131,072)"})
    per_device_train_batch_size: int = field(default=8, metadata={"help": "sequences per forward pass"})
    per_device_eval_batch_size: int = 8
    max_train_steps: int | None = None
    max_train_tokens: int | None = field(default=None, metadata={"help": "budget in B x N tokens; sets the steps"})
    learning_rate: float = 2.5e-4
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_epsilon: float = 1e-8
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    warmup_ratio: float = field(default=0.06, metadata={"help": "share of the steps with linear warmup"})
    num_warmup_steps: int | None = field(default=None, metadata={"help": "overrides warmup_ratio"})
    mlm_probability: float = 0.15
    seed: int = 0
    mixed_precision: str | None = field(default=None, metadata={"help": "no | fp16 | bf16 (default: accelerate's)"})
    # ---- logging and checkpoints
    logging_steps: int = 10
    eval_steps: int | None = field(default=None, metadata={"help": "evaluate every K steps (always at the end)"})
    checkpointing_steps: int | None = field(default=None, metadata={"help": "checkpoint every K steps"})
    save_total_limit: int | None = field(default=2, metadata={"help": "keep the newest K checkpoints"})
    resume_from_checkpoint: str | None = field(default=None, metadata={"help": "'latest' or a checkpoint folder"})
    stop_after_step: int | None = field(
        default=None, metadata={"help": "stop after this step (schedule unchanged) to resume later"}
    )
    report_to: str = field(default="auto", metadata={"help": "auto (tensorboard if installed) | tensorboard | none"})
    overwrite_output_dir: bool = False


# ---------------------------------------------------------------------------------------------------------------------
# Documents
# ---------------------------------------------------------------------------------------------------------------------


def split_documents(lines: Iterable[str], boundary: str, heading_regex: str = WIKITEXT_HEADING) -> Iterator[str]:
    """Documents of one stream of lines (a file): paragraphs (non-blank lines joined by spaces) joined by newlines."""
    if boundary not in DOCUMENT_BOUNDARIES:
        raise ValueError(f"document_boundary={boundary!r} is unknown: use one of {DOCUMENT_BOUNDARIES}.")
    heading = re.compile(heading_regex) if boundary == "heading" else None
    paragraphs: list[str] = []
    current: list[str] = []

    def finish_paragraph():
        if current:
            paragraphs.append(" ".join(current))
            current.clear()

    def finish_document():
        finish_paragraph()
        text = "\n".join(paragraphs)
        paragraphs.clear()
        return text

    for raw in lines:
        for line in raw.splitlines() or [""]:  # a file line ends in "\n"; a record may hold several lines
            line = line.strip()
            if not line:
                finish_paragraph()
                if boundary == "blank_line" and paragraphs:
                    yield finish_document()
                continue
            if heading is not None and heading.match(line) and (paragraphs or current):
                yield finish_document()
            current.append(line)
    document = finish_document()
    if document:
        yield document


def read_documents(
    paths: Sequence[str], boundary: str = "file", heading_regex: str = WIKITEXT_HEADING, text_column: str = "text"
) -> list[str]:
    """Documents of local `.txt`, `.txt.gz` and `.jsonl` files (see the module docstring for `boundary`)."""
    documents = []
    for path in paths:
        if not os.path.isfile(path):
            raise FileNotFoundError(f"Data file {path!r} does not exist.")
        if str(path).endswith(".jsonl"):
            records = []
            with open(path, encoding="utf-8") as handle:
                for number, line in enumerate(handle, 1):
                    if not line.strip():
                        continue
                    record = json.loads(line)
                    if text_column not in record:
                        raise ValueError(
                            f"{path}:{number} has no field {text_column!r} (--text_column); it has {sorted(record)}."
                        )
                    records.append(record[text_column])
            if boundary == "file":  # one record, one document
                documents.extend(doc for record in records for doc in split_documents([record], "file"))
            else:
                documents.extend(split_documents(records, boundary, heading_regex))
        elif str(path).endswith((".txt", ".txt.gz", ".raw", ".raw.gz", ".tokens", ".tokens.gz")):
            with open_text(path) as handle:
                documents.extend(split_documents(handle, boundary, heading_regex))
        else:
            raise ValueError(f"{path!r}: unsupported file type; use .txt, .txt.gz or .jsonl.")
    return documents


def load_hub_documents(
    name: str, config_name: str | None, split: str, text_column: str, boundary: str, heading_regex: str
) -> list[str]:
    """Documents of a hub dataset split: each row is a document (`"file"`), or rows are lines (otherwise)."""
    import datasets

    try:
        rows = datasets.load_dataset(name, config_name, split=split)
    except Exception as error:  # noqa: BLE001 - datasets raises many kinds; all mean "could not load"
        raise ValueError(
            f"Could not load the hub dataset {name!r} ({config_name}, split {split!r}): {error}. Without "
            "network access, pass local files with --train_files / --validation_files."
        ) from error
    texts = rows[text_column]
    if boundary == "file":
        return [doc for text in texts for doc in split_documents([text], "file")]
    return list(split_documents(texts, boundary, heading_regex))


# ---------------------------------------------------------------------------------------------------------------------
# Tokenizing, packing and masking
# ---------------------------------------------------------------------------------------------------------------------


def special_token_template(tokenizer: PreTrainedTokenizerBase) -> tuple[list[int], list[int]]:
    """The ids the tokenizer puts before and after one sequence (`<s>` / `</s>`, `[CLS]` / `[SEP]`)."""
    plain = tokenizer("a", add_special_tokens=False)["input_ids"]
    full = tokenizer("a", add_special_tokens=True)["input_ids"]
    for start in range(len(full) - len(plain) + 1):
        if full[start : start + len(plain)] == plain:
            return full[:start], full[start + len(plain) :]
    raise ValueError(f"Cannot tell {type(tokenizer).__name__}'s special tokens apart from the text.")


def pack_documents(
    token_ids: Sequence[Sequence[int]], seq_len: int, tokenizer: PreTrainedTokenizerBase, first_document: int = 0
) -> dict[str, list]:
    """DOC-SENTENCES packing: cuts each document's tokens into pieces of `seq_len - 2` (plus the special tokens);
    returns `input_ids` and the `document` each sequence comes from (documents are never mixed)."""
    prefix, suffix = special_token_template(tokenizer)
    content = seq_len - len(prefix) - len(suffix)
    if content < 1:
        raise ValueError(f"max_seq_length={seq_len} leaves no room for text next to the special tokens.")
    sequences, documents = [], []
    for offset, ids in enumerate(token_ids):
        for start in range(0, len(ids), content):
            sequences.append(prefix + list(ids[start : start + content]) + suffix)
            documents.append(first_document + offset)
    return {"input_ids": sequences, "document": documents}


def tokenize_and_pack(documents: Sequence[str], tokenizer: PreTrainedTokenizerBase, seq_len: int):
    """A `datasets.Dataset` of packed sequences with columns `input_ids`, `document`, `sequence_id`."""
    import datasets

    docs = datasets.Dataset.from_dict({"text": list(documents)})
    tokenized = docs.map(
        lambda batch: {
            "ids": tokenizer(batch["text"], add_special_tokens=False, return_attention_mask=False, verbose=False)[
                "input_ids"
            ]
        },
        batched=True,
        batch_size=64,
        remove_columns=["text"],
        desc="tokenizing",
    )
    packed = tokenized.map(
        lambda batch, indices: pack_documents(batch["ids"], seq_len, tokenizer, first_document=indices[0]),
        batched=True,
        with_indices=True,
        remove_columns=["ids"],
        desc="packing",
    )
    return packed.map(lambda batch, indices: {"sequence_id": indices}, batched=True, with_indices=True)


# Which documents are held out (--validation_split_percentage) and which validation tokens are masked do not depend
# on --seed: runs that differ only in their seed are scored on the very same masked tokens.
VALIDATION_SEED = 0


def masking_seed(seed: int, epoch: int | str, sequence_id: int) -> int:
    """A 63-bit seed that depends only on (seed, epoch, sequence id)."""
    digest = hashlib.blake2b(f"{seed}/{epoch}/{sequence_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & (2**63 - 1)


class MaskingCollator:
    """Pads packed sequences and masks them with `DataCollatorForLanguageModeling` (15 %, 80/10/10), each sequence
    with its own generator seeded by `masking_seed(seed, epoch, sequence_id)` (see the module docstring)."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, seed: int, epoch: int | str, mlm_probability: float = 0.15):
        self.mlm = DataCollatorForLanguageModeling(tokenizer, mlm_probability=mlm_probability)
        self.pad_token_id = tokenizer.pad_token_id
        self.seed, self.epoch = seed, epoch

    def __call__(self, examples: list[dict]) -> dict[str, torch.Tensor]:
        input_ids, labels = [], []
        for example in examples:
            self.mlm.generator = torch.Generator().manual_seed(
                masking_seed(self.seed, self.epoch, example["sequence_id"])
            )
            masked = self.mlm([{"input_ids": example["input_ids"]}])  # one unpadded sequence: masks independent of B
            input_ids.append(masked["input_ids"][0])
            labels.append(masked["labels"][0])
        lengths = torch.tensor([len(ids) for ids in input_ids])
        return {
            "input_ids": torch.nn.utils.rnn.pad_sequence(input_ids, batch_first=True, padding_value=self.pad_token_id),
            "attention_mask": (torch.arange(int(lengths.max()))[None, :] < lengths[:, None]).long(),
            "labels": torch.nn.utils.rnn.pad_sequence(labels, batch_first=True, padding_value=-100),
        }


# ---------------------------------------------------------------------------------------------------------------------
# Tokenizer, model, batch geometry
# ---------------------------------------------------------------------------------------------------------------------


def training_paragraphs(documents: Iterable[str]) -> Iterator[str]:
    for document in documents:
        yield from document.split("\n")


def prepare_tokenizer(
    args: PretrainingArguments, documents: Sequence[str] | None, accelerator=None
) -> PreTrainedTokenizerBase:
    """The tokenizer named by `tokenizer_name` / `model_name_or_path`, or one trained on the training documents and
    saved to `output_dir/tokenizer` (by the main process; a resumed run reuses it)."""
    if args.tokenizer_name or args.model_name_or_path:
        return AutoTokenizer.from_pretrained(args.tokenizer_name or args.model_name_or_path)
    if not args.train_tokenizer_vocab_size:
        raise ValueError(
            "No tokenizer: pass --tokenizer_name FOLDER, --model_name_or_path FOLDER (with its "
            "tokenizer) or --train_tokenizer_vocab_size V to train one on the training files."
        )
    folder = Path(args.output_dir) / "tokenizer"
    is_main = accelerator is None or accelerator.is_main_process
    if is_main and not folder.exists():
        tokenizer = train_roberta_tokenizer(
            training_paragraphs(documents), args.train_tokenizer_vocab_size, model_max_length=args.max_seq_length
        )
        save_atomically(folder, tokenizer.save_pretrained)
    if accelerator is not None:
        accelerator.wait_for_everyone()
    return AutoTokenizer.from_pretrained(folder)


def build_model(args: PretrainingArguments, tokenizer: PreTrainedTokenizerBase) -> BlockBertForMaskedLM:
    """From `model_name_or_path` (blockwise options override its config) or from scratch."""
    blockwise = {
        key: getattr(args, key)
        for key in ("num_blocks", "heads_per_shift", "attention_pattern")
        if getattr(args, key) is not None
    }
    if "heads_per_shift" in blockwise:
        blockwise["heads_per_shift"] = parse_heads_per_shift(blockwise["heads_per_shift"])
    dropout = {
        key: getattr(args, key)
        for key in ("hidden_dropout_prob", "attention_probs_dropout_prob")
        if getattr(args, key) is not None
    }
    if args.model_name_or_path:
        config = BlockBertConfig.from_pretrained(args.model_name_or_path)
        if blockwise or args.block_size is not None:  # rebuild: b and the head split default again for a new n
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
        model = BlockBertForMaskedLM.from_pretrained(args.model_name_or_path, config=config)
    else:
        if args.config_name:
            base = BlockBertConfig.from_pretrained(args.config_name).to_dict()
        else:
            base = {}
        sizes = {
            key: getattr(args, key)
            for key in ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size")
            if getattr(args, key) is not None
        }
        if "hidden_size" in sizes and "intermediate_size" not in sizes:
            sizes["intermediate_size"] = 4 * sizes["hidden_size"]
        fields = {**base, **sizes, **dropout, **blockwise}
        style = fields.get("position_embedding_style", "roberta")
        pad = tokenizer.pad_token_id
        fields.update(
            vocab_size=len(tokenizer),
            pad_token_id=pad,
            bos_token_id=tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.cls_token_id,
            eos_token_id=tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.sep_token_id,
            max_position_embeddings=args.max_seq_length + (pad + 1 if style == "roberta" else 0),
            block_size=args.block_size,
        )
        config = BlockBertConfig.from_dict(fields) if base else BlockBertConfig(**fields)
        model = BlockBertForMaskedLM(config)
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


def _optimizer(model, args: PretrainingArguments) -> torch.optim.Optimizer:
    decay, no_decay = [], []
    for name, parameter in model.named_parameters():
        if not parameter.requires_grad:
            continue
        (no_decay if name.endswith("bias") or "LayerNorm" in name or "layer_norm" in name else decay).append(parameter)
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=args.learning_rate,
        betas=(args.adam_beta1, args.adam_beta2),
        eps=args.adam_epsilon,
    )


# ---------------------------------------------------------------------------------------------------------------------
# Checkpoints
# ---------------------------------------------------------------------------------------------------------------------


def list_checkpoints(output_dir: str | os.PathLike) -> list[Path]:
    """Complete checkpoints (with `trainer_state.json`), oldest first; half-written ones are hidden dot-folders."""
    folder = Path(output_dir) / CHECKPOINTS_DIR
    if not folder.is_dir():
        return []
    found = [path for path in folder.glob("step_*") if (path / TRAINER_STATE).is_file()]
    return sorted(found, key=lambda path: int(path.name.split("_")[1]))


def resolve_checkpoint(output_dir: str, resume_from_checkpoint: str) -> Path:
    if resume_from_checkpoint == "latest":
        checkpoints = list_checkpoints(output_dir)
        if not checkpoints:
            raise ValueError(
                f"--resume_from_checkpoint latest: no complete checkpoint in {output_dir}/{CHECKPOINTS_DIR}."
            )
        return checkpoints[-1]
    path = Path(resume_from_checkpoint)
    if not (path / TRAINER_STATE).is_file():
        raise ValueError(f"{path} is not a complete checkpoint (it has no {TRAINER_STATE}).")
    return path


def save_checkpoint(accelerator, folder: Path, trainer_state: dict, save_total_limit: int | None):
    """`Accelerator.save_state` + `trainer_state.json` into one atomic folder (every process writes its RNG state
    into the staging folder the main process created)."""
    from accelerate.utils import broadcast_object_list

    atomic = atomic_directory(folder) if accelerator.is_main_process else None
    staging = [str(atomic.__enter__()) if atomic is not None else None]
    broadcast_object_list(staging)
    try:
        accelerator.save_state(staging[0])
        if accelerator.is_main_process:
            Path(staging[0], TRAINER_STATE).write_text(json.dumps(trainer_state, indent=2) + "\n")
        accelerator.wait_for_everyone()
    except BaseException as error:
        if atomic is not None:
            atomic.__exit__(type(error), error, error.__traceback__)
        raise
    if atomic is not None:
        atomic.__exit__(None, None, None)
        if save_total_limit:
            for old in list_checkpoints(folder.parent)[:-save_total_limit]:
                shutil.rmtree(old, ignore_errors=True)
    accelerator.wait_for_everyone()


# ---------------------------------------------------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------------------------------------------------


def _schedule_fields(args: PretrainingArguments, geometry: BatchGeometry, total_steps: int) -> dict:
    return {
        "max_seq_length": args.max_seq_length,
        "sequences_per_step": geometry.sequences_per_step,
        "total_steps": total_steps,
        "seed": args.seed,
    }


def _dropout_seed(seed: int, step: int, process: int) -> int:
    return masking_seed(seed, f"dropout-{step}", process)


def _masked_lm_sums(model, batch) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed cross-entropy over the masked tokens of a batch, and their number. The model computes the (mean) loss,
    with `config.sparse_prediction` only on the masked positions; mean x count is the sum the global mean needs."""
    labels = batch["labels"]
    count = (labels != -100).sum()
    output = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=labels)
    if int(count) == 0:  # the mean of nothing is NaN; keep the graph (DDP expects every parameter) with a zero loss
        return output.logits.sum() * 0.0, count
    return output.loss.float() * count, count


def evaluate(model, dataset, collator, accelerator, batch_size: int) -> dict[str, float]:
    """Validation loss (mean over all masked tokens) and perplexity; each process takes a contiguous shard."""
    shard = dataset.shard(num_shards=accelerator.num_processes, index=accelerator.process_index, contiguous=True)
    loader = DataLoader(shard, batch_size=batch_size, collate_fn=collator)
    totals = torch.zeros(2, dtype=torch.float64, device=accelerator.device)
    was_training = model.training
    model.eval()
    with torch.no_grad(), accelerator.autocast():
        for batch in loader:
            batch = {key: value.to(accelerator.device) for key, value in batch.items()}
            loss_sum, count = _masked_lm_sums(model, batch)
            totals += torch.stack([loss_sum.double(), count.double()])
    model.train(was_training)
    totals = accelerator.reduce(totals, reduction="sum")
    loss = (totals[0] / totals[1]).item()
    return {"eval_loss": loss, "eval_perplexity": math.exp(loss), "eval_masked_tokens": int(totals[1].item())}


class MetricsLog:
    """`metrics.jsonl` (main process) and the Accelerate trackers."""

    def __init__(self, path: Path, accelerator, resume_step: int | None):
        self.path, self.accelerator = path, accelerator
        if accelerator.is_main_process:
            if resume_step is None:
                path.write_text("")
            elif path.exists():  # drop what a killed run logged after its last checkpoint
                kept = [
                    line
                    for line in path.read_text().splitlines()
                    if line.strip() and json.loads(line).get("step", 0) <= resume_step
                ]
                path.write_text("".join(line + "\n" for line in kept))

    def log(self, record: dict):
        if self.accelerator.is_main_process:
            with self.path.open("a") as handle:
                handle.write(json.dumps(record) + "\n")
        self.accelerator.log({k: v for k, v in record.items() if k != "step"}, step=record["step"])


def _trackers(report_to: str) -> list[str] | None:
    if report_to == "none":
        return None
    if report_to == "auto":
        return ["tensorboard"] if importlib.util.find_spec("tensorboard") is not None else None
    return [report_to]


def load_training_data(args: PretrainingArguments):
    """(training documents, validation documents or None)."""
    if bool(args.train_files) == bool(args.dataset_name):
        raise ValueError(
            "Pass either --train_files (local .txt/.txt.gz/.jsonl) or --dataset_name (hub), not both or neither."
        )
    if args.train_files:
        train = read_documents(args.train_files, args.document_boundary, args.document_heading_regex, args.text_column)
        validation = (
            read_documents(args.validation_files, args.document_boundary, args.document_heading_regex, args.text_column)
            if args.validation_files
            else None
        )
    else:
        load = functools.partial(
            load_hub_documents,
            args.dataset_name,
            args.dataset_config_name,
            text_column=args.text_column,
            boundary=args.document_boundary,
            heading_regex=args.document_heading_regex,
        )
        train = load("train")
        validation = None
        if not args.validation_split_percentage:
            try:
                validation = load("validation")
            except ValueError:
                validation = None
    if not train:
        raise ValueError("The training files hold no text.")
    if validation is None and args.validation_split_percentage:
        generator = torch.Generator().manual_seed(VALIDATION_SEED)
        order = torch.randperm(len(train), generator=generator).tolist()
        held_out = max(1, int(len(train) * args.validation_split_percentage / 100))
        if held_out >= len(train):
            raise ValueError(
                f"validation_split_percentage={args.validation_split_percentage} leaves no training "
                f"documents ({len(train)} in all)."
            )
        validation = [train[i] for i in sorted(order[:held_out])]
        train = [train[i] for i in sorted(order[held_out:])]
    return train, validation


def run_pretraining(args: PretrainingArguments) -> dict:
    """Trains (or resumes) and returns the results written to `results.json` (main process)."""
    from accelerate import Accelerator
    from accelerate.utils import set_seed

    if args.document_boundary not in DOCUMENT_BOUNDARIES:
        raise ValueError(f"document_boundary={args.document_boundary!r} is unknown: use one of {DOCUMENT_BOUNDARIES}.")
    output_dir = Path(args.output_dir)
    resume_from = None
    if args.resume_from_checkpoint:
        resume_from = resolve_checkpoint(args.output_dir, args.resume_from_checkpoint)
    elif list_checkpoints(output_dir) and not args.overwrite_output_dir:
        raise ValueError(
            f"{output_dir} already holds checkpoints: pass --resume_from_checkpoint latest to continue "
            "or --overwrite_output_dir to start over."
        )

    accelerator = Accelerator(
        mixed_precision=args.mixed_precision, log_with=_trackers(args.report_to), project_dir=str(output_dir)
    )
    if accelerator.is_main_process:
        if args.overwrite_output_dir and not resume_from and (output_dir / CHECKPOINTS_DIR).exists():
            shutil.rmtree(output_dir / CHECKPOINTS_DIR)
        output_dir.mkdir(parents=True, exist_ok=True)
    accelerator.wait_for_everyone()
    geometry = batch_geometry(
        args.tokens_per_batch, args.max_seq_length, accelerator.num_processes, args.per_device_train_batch_size
    )
    if args.max_train_steps:
        total_steps = args.max_train_steps
    elif args.max_train_tokens:
        total_steps = math.ceil(args.max_train_tokens / args.tokens_per_batch)
    else:
        raise ValueError("Give the training length: --max_train_steps S or --max_train_tokens T (B x N tokens).")

    train_documents, validation_documents = load_training_data(args)
    tokenizer = prepare_tokenizer(args, train_documents, accelerator)
    set_seed(args.seed)  # the same initial weights in every process
    model = build_model(args, tokenizer)
    train_data = tokenize_and_pack(train_documents, tokenizer, args.max_seq_length)
    eval_data = None
    if validation_documents:
        eval_data = tokenize_and_pack(validation_documents, tokenizer, args.max_seq_length)
        if args.max_eval_sequences:
            eval_data = eval_data.select(range(min(args.max_eval_sequences, len(eval_data))))
    steps_per_epoch = len(train_data) // geometry.sequences_per_step
    if steps_per_epoch == 0:
        raise ValueError(
            f"The training data packs into {len(train_data)} sequences of N = {args.max_seq_length}, fewer than one "
            f"batch of B = {geometry.sequences_per_step}: lower tokens_per_batch or add data."
        )

    optimizer = _optimizer(model, args)
    warmup = args.num_warmup_steps if args.num_warmup_steps is not None else round(args.warmup_ratio * total_steps)
    # Not passed to `prepare`: Accelerate would step it once per process; it is stepped once per optimizer step.
    scheduler = get_linear_schedule_with_warmup(optimizer, warmup, total_steps)
    model, optimizer = accelerator.prepare(model, optimizer)
    accelerator.register_for_checkpointing(scheduler)

    state = {"step": 0, "real_tokens_seen": 0, "train_seconds": 0.0}
    schedule = _schedule_fields(args, geometry, total_steps)
    if resume_from is not None:
        saved = json.loads((resume_from / TRAINER_STATE).read_text())
        if saved["schedule"] != schedule:
            raise ValueError(
                f"{resume_from} was written by a run with {saved['schedule']}, this run has {schedule}: "
                "resume with the same sequence length, batch, length and seed."
            )
        accelerator.load_state(str(resume_from))
        state = {key: saved[key] for key in state}
        logger.info(f"resumed from {resume_from} at step {state['step']}")
    metrics = MetricsLog(output_dir / METRICS_FILE, accelerator, state["step"] if resume_from else None)
    if accelerator.is_main_process:
        (output_dir / "run_args.json").write_text(json.dumps(asdict(args), indent=2) + "\n")
    tracker_config = {k: v for k, v in asdict(args).items() if isinstance(v, (int, float, str, bool))}
    accelerator.init_trackers("blockbert_mlm", config=tracker_config)

    eval_collator = MaskingCollator(tokenizer, VALIDATION_SEED, "eval", args.mlm_probability)
    unwrapped = accelerator.unwrap_model(model)
    progress = tqdm(
        total=total_steps,
        initial=state["step"],
        disable=not accelerator.is_local_main_process,
        desc="pre-training",
        unit="step",
    )
    last_stop = min(total_steps, args.stop_after_step or total_steps)
    window = {"loss": 0.0, "steps": 0, "tokens": 0, "seconds": 0.0}
    model.train()
    while state["step"] < last_stop:
        epoch, step_in_epoch = divmod(state["step"], steps_per_epoch)
        order = torch.randperm(len(train_data), generator=torch.Generator().manual_seed(args.seed + epoch))
        epoch_data = train_data.select(order[: steps_per_epoch * geometry.sequences_per_step].tolist())
        loader = accelerator.prepare(
            DataLoader(
                epoch_data,
                batch_size=geometry.micro_batch,
                shuffle=False,
                collate_fn=MaskingCollator(tokenizer, args.seed, epoch, args.mlm_probability),
            )
        )
        if step_in_epoch:
            loader = accelerator.skip_first_batches(loader, step_in_epoch * geometry.accumulation_steps)
        batches = iter(loader)
        while step_in_epoch < steps_per_epoch and state["step"] < last_stop:
            started = time.perf_counter()
            micro_batches = [next(batches) for _ in range(geometry.accumulation_steps)]
            torch.manual_seed(_dropout_seed(args.seed, state["step"], accelerator.process_index))
            local_count = sum((batch["labels"] != -100).sum() for batch in micro_batches)
            global_count = accelerator.reduce(local_count.to(accelerator.device), reduction="sum").clamp(min=1)
            loss_sum = torch.zeros((), device=accelerator.device)
            for index, batch in enumerate(micro_batches):
                last = index == len(micro_batches) - 1
                with contextlib.nullcontext() if last else accelerator.no_sync(model):
                    batch_loss, _ = _masked_lm_sums(model, batch)
                    # DDP averages gradients over processes; the loss is a mean over the global batch's masked tokens.
                    accelerator.backward(batch_loss * accelerator.num_processes / global_count)
                loss_sum += batch_loss.detach()
            grad_norm = accelerator.clip_grad_norm_(model.parameters(), args.max_grad_norm)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            loss = (accelerator.reduce(loss_sum, reduction="sum") / global_count).item()
            real_tokens = accelerator.reduce(
                sum(batch["attention_mask"].sum() for batch in micro_batches).to(accelerator.device), reduction="sum"
            )
            seconds = time.perf_counter() - started
            state["step"] += 1
            step_in_epoch += 1
            state["real_tokens_seen"] += int(real_tokens.item())
            state["train_seconds"] += seconds
            window["loss"] += loss
            window["steps"] += 1
            window["tokens"] += int(real_tokens.item())
            window["seconds"] += seconds
            progress.update(1)
            progress.set_postfix(loss=f"{loss:.3f}")
            step = state["step"]
            if step % args.logging_steps == 0 or step == total_steps:
                metrics.log(
                    {
                        "step": step,
                        "epoch": epoch,
                        "loss": window["loss"] / window["steps"],
                        "last_loss": loss,
                        "lr": scheduler.get_last_lr()[0],
                        "grad_norm": float(grad_norm),
                        "real_tokens_seen": state["real_tokens_seen"],
                        "tokens_per_second": window["tokens"] / window["seconds"],
                        "train_seconds": state["train_seconds"],
                    }
                )
                window = {"loss": 0.0, "steps": 0, "tokens": 0, "seconds": 0.0}
            if eval_data is not None and args.eval_steps and step % args.eval_steps == 0 and step != total_steps:
                metrics.log(
                    {
                        "step": step,
                        **evaluate(unwrapped, eval_data, eval_collator, accelerator, args.per_device_eval_batch_size),
                    }
                )
            if args.checkpointing_steps and step % args.checkpointing_steps == 0:
                trainer_state = {**state, "epoch": epoch, "step_in_epoch": step_in_epoch, "schedule": schedule}
                save_checkpoint(
                    accelerator, output_dir / CHECKPOINTS_DIR / f"step_{step}", trainer_state, args.save_total_limit
                )
    progress.close()

    results = {"step": state["step"], "finished": state["step"] >= total_steps}
    if state["step"] >= total_steps:
        if eval_data is not None:
            final = evaluate(unwrapped, eval_data, eval_collator, accelerator, args.per_device_eval_batch_size)
            metrics.log({"step": state["step"], **final})
            results.update(final)
        config = unwrapped.config
        results.update(
            {
                "total_steps": total_steps,
                "tokens_per_batch": args.tokens_per_batch,
                "train_tokens": total_steps * args.tokens_per_batch,
                "real_tokens_seen": state["real_tokens_seen"],
                "train_seconds": state["train_seconds"],
                "tokens_per_second": state["real_tokens_seen"] / max(state["train_seconds"], 1e-9),
                "num_processes": accelerator.num_processes,
                "train_sequences": len(train_data),
                "eval_sequences": len(eval_data) if eval_data is not None else 0,
                "parameters": unwrapped.num_parameters(),
                "model": {
                    key: getattr(config, key)
                    for key in (
                        "num_hidden_layers",
                        "hidden_size",
                        "num_attention_heads",
                        "intermediate_size",
                        "vocab_size",
                        "max_sequence_length",
                        "attention_pattern",
                        "num_blocks",
                        "block_size",
                        "heads_per_shift",
                    )
                },
                "seed": args.seed,
            }
        )
        accelerator.wait_for_everyone()
        unwrapped.config.sparse_prediction = False  # a training-time setting: the saved model returns full logits
        if accelerator.is_main_process:
            save_atomically(output_dir / "final_model", unwrapped.save_pretrained, tokenizer.save_pretrained)
            (output_dir / RESULTS_FILE).write_text(json.dumps(results, indent=2) + "\n")
    accelerator.wait_for_everyone()
    accelerator.end_training()
    return results


# ---------------------------------------------------------------------------------------------------------------------
# Comparison table (examples/pretraining_comparison.py)
# ---------------------------------------------------------------------------------------------------------------------


def evaluate_saved_model(
    model_path: str,
    validation_files: Sequence[str],
    document_boundary: str = "file",
    document_heading_regex: str = WIKITEXT_HEADING,
    text_column: str = "text",
    max_eval_sequences: int | None = None,
    batch_size: int = 16,
    mlm_probability: float = 0.15,
) -> dict[str, float]:
    """Validation loss and perplexity of a saved masked LM (e.g. a run's `final_model/`) on local text files, packed
    and masked exactly as `run_pretraining` validates (N = the model's; masks seeded by `VALIDATION_SEED`)."""
    from accelerate import Accelerator
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    if not validation_files:
        raise ValueError("Give at least one validation file (.txt, .txt.gz or .jsonl).")
    model = AutoModelForMaskedLM.from_pretrained(model_path)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    seq_len = getattr(model.config, "max_sequence_length", None) or tokenizer.model_max_length
    documents = read_documents(validation_files, document_boundary, document_heading_regex, text_column)
    data = tokenize_and_pack(documents, tokenizer, seq_len)
    if max_eval_sequences:
        data = data.select(range(min(max_eval_sequences, len(data))))
    collator = MaskingCollator(tokenizer, VALIDATION_SEED, "eval", mlm_probability)
    accelerator = Accelerator()
    metrics = evaluate(accelerator.prepare(model), data, collator, accelerator, batch_size)
    return {**metrics, "eval_sequences": len(data)}


def comparison_table(runs: Sequence[tuple[str, dict]]) -> str:
    """A markdown table of `(label, results.json)` pairs: pattern, blocks, heads, steps, tokens, perplexity, speed."""
    header = (
        "| run | attention | n | heads per shift | seed | steps | train tokens (B x N) | val. loss | "
        "val. perplexity | tokens/s (real) | train time (min) |"
    )
    lines = [header, "|" + "|".join(["---"] * 11) + "|"]
    for label, result in runs:
        model = result["model"]
        blockwise = model["attention_pattern"] == "blockwise"
        blocks, heads = (model["num_blocks"], model["heads_per_shift"]) if blockwise else ("-", "-")
        lines.append(
            f"| {label} | {model['attention_pattern']} | {blocks} | {heads} | {result['seed']} | "
            f"{result['total_steps']} | {result['train_tokens']:,} | {result.get('eval_loss', float('nan')):.4f} | "
            f"{result.get('eval_perplexity', float('nan')):.2f} | {result['tokens_per_second']:.0f} | "
            f"{result['train_seconds'] / 60:.1f} |"
        )
    return "\n".join(lines)


__all__ = [
    "MaskingCollator",
    "PretrainingArguments",
    "batch_geometry",
    "build_model",
    "comparison_table",
    "evaluate",
    "evaluate_saved_model",
    "list_checkpoints",
    "load_training_data",
    "pack_documents",
    "prepare_tokenizer",
    "read_documents",
    "run_pretraining",
    "split_documents",
    "tokenize_and_pack",
]
