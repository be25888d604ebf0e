"""Fine-tuning and evaluation of extractive QA models: `run_qa(QARunConfig)`, which `examples/run_qa.py` wires to its
command line. Checkpoints, exact resume, the metrics log and the guards come from `blockbert_hf.training`."""

import hashlib
import json
import math
import numbers
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import datasets
import numpy as np
import torch
import transformers
from accelerate import Accelerator
from accelerate.logging import get_logger
from accelerate.utils import ProjectConfiguration, set_seed
from torch.utils.data import DataLoader
from tqdm.auto import tqdm
from transformers import AutoConfig, AutoModelForQuestionAnswering, AutoTokenizer, DataCollatorWithPadding
from transformers.trainer_pt_utils import LengthGroupedSampler

from ..model_card import DEFAULT_LICENSE, qa_model_card, write_model_card
from ..pipeline_question_answering import (
    DEFAULT_WINDOW_LAYOUT,
    QA_SETTINGS_ATTRIBUTE,
    WINDOW_LAYOUTS,
    WINDOW_SCORING_RULES,
    check_window_layout,
    check_window_scoring,
    default_max_seq_len,
    model_window_scoring,
    qa_settings,
    resolve_window_layout,
)
from ..saving import save_atomically, write_json_atomically
from ..training import (
    GRADIENT_CHECKPOINTING_HELP,
    HUB_MODEL_ID_HELP,
    INPUT_DIGESTS,
    METRICS_FILE,
    PUSH_TO_HUB_HELP,
    REPORT_TO_HELP,
    MetricsLog,
    OutputLayout,
    check_at_least,
    check_finite,
    check_in_range,
    check_input_paths,
    check_launch,
    check_output_dir,
    check_positive,
    checkpoint_to_resume,
    claim_output_dir,
    create_optimizer,
    create_scheduler,
    dropout_seed,
    enable_gradient_checkpointing,
    end_run,
    hub_repo_id,
    input_digests,
    load_checkpoint,
    push_folder_to_hub,
    read_metrics,
    run_arguments,
    save_checkpoint,
    step_scheduler,
    trackers,
    warmup_steps,
    warn_emulated_bf16,
)
from .data import has_impossible_questions, load_qa_dataset, realign_answers
from .features import EVAL_METADATA_COLUMNS, check_question_lengths, prepare_eval_features, prepare_train_features
from .objective import (
    QA_OBJECTIVE_KEY,
    QA_OBJECTIVES,
    check_block_null_tokens,
    check_qa_objective,
    per_block_span_loss,
    resolve_qa_objective,
)
from .postprocessing import load_squad_metric, postprocess_qa_predictions, squad_references
from .task_distillation import TeacherLogits, span_distillation_loss


logger = get_logger(__name__)

FEATURE_INDEX = "window_index"  # the training windows' column that finds their teacher logits (task distillation)
# Fine-tuning defaults: 4 epochs (the paper's), linear decay with 10 percent warmup, batch 32 and a learning rate picked
# on the dev set from this grid (the usual BERT/RoBERTa-base SQuAD settings; not re-checked against the paper's
# appendix). Small models want more: results/qa_recipe measured all-MiniLM-L6-v2 at batch 16 best at 2e-4.
LEARNING_RATE_GRID = (1e-5, 2e-5, 3e-5, 5e-5)
MINILM_LEARNING_RATE = 2e-4
MODEL_DIR = "model"
# The layout of a model with block-relative positions whose windows span several blocks, unless it records another:
# results/qa_recipe measured it far above question_first there (dev F1 51.2 against 11.0 at N = 1024, n = 2).
BLOCK_RELATIVE_WINDOW_LAYOUT = "question_prefixed_blocks"


@dataclass
class QARunConfig:
    """Everything `run_qa` needs; `examples/run_qa.py` parses it with `transformers.HfArgumentParser`."""

    model_name_or_path: str = field(metadata={"help": "a saved model folder (or Hub id)"})
    output_dir: str = field(metadata={"help": "model/, checkpoints/, metrics.jsonl, eval_*.json"})
    tokenizer_name: str | None = field(default=None, metadata={"help": "tokenizer folder, if not the model's"})
    # ---- data
    dataset_name: str | None = field(
        default=None,
        metadata={
            "help": "a Hub dataset id with the SQuAD columns (id, title, context, question, answers), e.g. "
            "rajpurkar/squad or rajpurkar/squad_v2, or in the MRQA schema (mrqa-workshop/mrqa); or a local folder "
            "(Dataset.save_to_disk, or one datasets.load_dataset reads) or file (SQuAD .json, MRQA .jsonl, rows as "
            "Dataset.to_json or .parquet writes them)"
        },
    )
    dataset_config_name: str | None = field(
        default=None, metadata={"help": "the configuration of --dataset_name (datasets.load_dataset's name)"}
    )
    mrqa_subset: str | None = field(
        default=None,
        metadata={"help": "keep one subset of MRQA rows, e.g. SQuAD, NewsQA, TriviaQA-web, HotpotQA"},
    )
    train_file: str | None = field(default=None, metadata={"help": "SQuAD .json(.gz) or MRQA .jsonl(.gz) to train on"})
    validation_file: str | None = field(
        default=None, metadata={"help": "SQuAD .json(.gz) or MRQA .jsonl(.gz) to evaluate on"}
    )
    train_split: str = "train"
    validation_split: str = "validation"
    do_train: bool = False
    do_eval: bool = False
    version_2_with_negative: bool | None = field(
        default=None,
        metadata={"help": "allow the empty answer (SQuAD 2.0); default: on when some question has no answer"},
    )
    # ---- windows and answers
    max_seq_length: int | None = field(default=None, metadata={"help": "tokens per window (None: the model's N)"})
    doc_stride: int = field(default=128, metadata={"help": "overlap between windows"})
    negative_window_rate: float = field(
        default=1.0,
        metadata={
            "help": "share of the training windows without their question's answer that are kept (labelled null; a "
            "seeded draw per window); below 1 on long contexts, where most windows hold no answer"
        },
    )
    window_scoring: str | None = field(
        default=None,
        metadata={
            "help": f"how answers of different windows are compared, one of {', '.join(WINDOW_SCORING_RULES)} "
            "(default: the rule the model was fine-tuned for, else null_relative); saved with a fine-tuned model"
        },
    )
    window_layout: str | None = field(
        default=None,
        metadata={
            "help": f"how a window is laid out, one of {', '.join(WINDOW_LAYOUTS)}: the question then the context, "
            "or every block of the model's block size b holding the question then its chunk of the context (for "
            "BlockBERT, best with block_relative_positions); default: the layout the model was fine-tuned on, else "
            f"{BLOCK_RELATIVE_WINDOW_LAYOUT} for a model with block_relative_positions whose windows span more than "
            "one block (measured far better there: dev F1 51.2 against 11.0, results/qa_recipe), else question_first; "
            "saved with a fine-tuned model"
        },
    )
    qa_objective: str | None = field(
        default=None,
        metadata={
            "help": f"the training loss, one of {', '.join(QA_OBJECTIVES)}: one start/end softmax over the whole "
            "window, whose first [CLS] is the null label, or one per block of a question_prefixed_blocks window, each "
            "block labelled null at its own [CLS] where the answer is elsewhere (the [CLS] that null_relative scoring "
            "reads; both are the same with one block per window); default: the objective the model was fine-tuned "
            "with, else window; saved with a fine-tuned model"
        },
    )
    # ---- task distillation (blockbert_hf.qa.task_distillation)
    teacher_model_name_or_path: str | None = field(
        default=None,
        metadata={
            "help": "a fine-tuned QA model whose start/end distributions the student also learns: loss = alpha * T^2 "
            "* KL(teacher || student) + (1 - alpha) * CE; with the per-block objective the teacher reads every block "
            "as an input of its own. Its logits over the training windows are computed before training"
        },
    )
    teacher_logits: str | None = field(
        default=None,
        metadata={
            "help": "a file of the teacher's logits over the training windows (fp16): written there when "
            "--teacher_model_name_or_path is given and it does not exist, read instead of the teacher otherwise"
        },
    )
    distillation_temperature: float = field(default=2.0, metadata={"help": "T of the distillation loss"})
    distillation_alpha: float = field(default=0.5, metadata={"help": "the distillation loss's share of the loss"})
    # ---- training
    num_train_epochs: float = 4.0
    max_train_steps: int | None = field(default=None, metadata={"help": "overrides --num_train_epochs"})
    learning_rate: float = field(
        default=3e-5,
        metadata={
            "help": f"pick it on the dev set: {', '.join(map(str, LEARNING_RATE_GRID))} are the usual settings for "
            f"BERT/RoBERTa-base; small models want more (all-MiniLM-L6-v2 at batch 16: {MINILM_LEARNING_RATE} scored "
            "best of 5e-5, 1e-4, 2e-4 and 3e-4, which diverged; results/qa_recipe)"
        },
    )
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    per_device_train_batch_size: int = 32
    per_device_eval_batch_size: int = 64
    gradient_accumulation_steps: int = 1
    max_train_samples: int | None = field(default=None, metadata={"help": "use only the first N training questions"})
    max_eval_samples: int | None = field(default=None, metadata={"help": "use only the first N evaluation questions"})
    preprocessing_num_workers: int | None = field(
        default=None,
        metadata={"help": "processes that cut questions into windows (datasets' num_proc); the windows are the same"},
    )
    n_best_size: int = 20
    max_answer_length: int = field(default=30, metadata={"help": "in tokens"})
    null_score_diff_threshold: float = field(
        default=0.0, metadata={"help": "SQuAD 2.0: the null answer must beat the best span by more than this"}
    )
    seed: int = 42
    checkpointing_steps: str | None = field(default=None, metadata={"help": "a checkpoint every N steps, or 'epoch'"})
    save_total_limit: int | None = field(default=None, metadata={"help": "keep only the newest K checkpoints"})
    resume: bool = field(default=False, metadata={"help": "continue from the latest checkpoint in output_dir"})
    resume_from_checkpoint: str | None = field(
        default=None, metadata={"help": "a checkpoint folder, or 'latest' in output_dir"}
    )
    overwrite_output_dir: bool = field(
        default=False, metadata={"help": "replace the outputs of an earlier run in output_dir"}
    )
    mixed_precision: Literal["no", "fp16", "bf16"] | None = field(
        default=None, metadata={"help": "None: accelerate's configuration"}
    )
    logging_steps: int = 50
    eval_strategy: Literal["no", "epoch"] = field(
        default="no",
        metadata={
            "help": "epoch: with --do_train --do_eval, also evaluate after every epoch (loss, EM and F1 on the "
            "validation set go to metrics.jsonl and the model card's training results)"
        },
    )
    write_nbest: bool = field(default=False, metadata={"help": "also write eval_nbest_predictions.json"})
    group_by_length: bool = field(
        default=False,
        metadata={"help": "batch training windows of similar lengths (much less padding; SQuAD: about 2x faster)"},
    )
    attn_implementation: str | None = field(
        default=None, metadata={"help": "eager, sdpa, flex_attention, ... (None: the model's)"}
    )
    attention_probs_dropout_prob: float | None = field(
        default=None,
        metadata={
            "help": "attention dropout while fine-tuning (None: the model's); with 0, PyTorch's SDPA runs its fused "
            "kernel, while any dropout makes it fall back to the unfused one, several times slower on CPU"
        },
    )
    gradient_checkpointing: bool = field(default=False, metadata={"help": GRADIENT_CHECKPOINTING_HELP})
    report_to: Literal["auto", "tensorboard", "none"] = field(default="none", metadata={"help": REPORT_TO_HELP})
    push_to_hub: bool = field(default=False, metadata={"help": PUSH_TO_HUB_HELP})
    hub_model_id: str | None = field(default=None, metadata={"help": HUB_MODEL_ID_HELP})
    trust_remote_code: bool = field(default=False, metadata={"help": "allow code saved with the model"})
    license: str = field(
        default=DEFAULT_LICENSE,
        metadata={
            "help": "the license on the model card (model/README.md), a Hub license id such as apache-2.0; 'other' "
            "by default, as the weights' terms follow the starting model's and the data's"
        },
    )


# What a QA run writes. Evaluation, logging and checkpoint options may differ when a run resumes.
QA_OUTPUTS = OutputLayout(
    finished=(MODEL_DIR, "eval_metrics.json"),
    other=(
        "eval_predictions.json",
        "eval_predictions_by_window_scoring.json",
        "eval_null_odds.json",
        "eval_nbest_predictions.json",
    ),
    resume_safe=frozenset(
        {
            "output_dir",
            "do_eval",
            "validation_file",
            "validation_split",
            "max_eval_samples",
            "per_device_eval_batch_size",
            "n_best_size",
            "max_answer_length",
            "null_score_diff_threshold",
            "window_scoring",
            "version_2_with_negative",
            "write_nbest",
            "preprocessing_num_workers",
            "eval_strategy",
            "logging_steps",
            "checkpointing_steps",
            "save_total_limit",
            "resume",
            "resume_from_checkpoint",
            "overwrite_output_dir",
            "attn_implementation",
            "gradient_checkpointing",
            "report_to",
            "push_to_hub",
            "hub_model_id",
            "license",
        }
    ),
)


def _checkpoint_every(value: str | None) -> int | str | None:
    if value is None or value == "epoch":
        return value
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"--checkpointing_steps must be a positive number of steps or 'epoch', got {value!r}.")
    return int(value)


# ---------------------------------------------------------------------------------------------------------------------
# Model and data
# ---------------------------------------------------------------------------------------------------------------------


def _load_model_and_tokenizer(config: QARunConfig):
    tokenizer = AutoTokenizer.from_pretrained(
        config.tokenizer_name or config.model_name_or_path, trust_remote_code=config.trust_remote_code
    )
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError(
            f"{type(tokenizer).__name__} is not a fast tokenizer: windows need its overflow and offset mapping."
        )
    tokenizer.padding_side = "right"  # BlockBERT rejects left padding; offsets assume the question comes first
    model_kwargs = {"trust_remote_code": config.trust_remote_code}
    if config.attn_implementation:
        model_kwargs["attn_implementation"] = config.attn_implementation
    if config.attention_probs_dropout_prob is not None:
        model_kwargs["attention_probs_dropout_prob"] = config.attention_probs_dropout_prob
    model = AutoModelForQuestionAnswering.from_pretrained(config.model_name_or_path, **model_kwargs)
    return model, tokenizer


def resolve_window_lengths(model, tokenizer, max_seq_length: int | None, doc_stride: int) -> tuple[int, int]:
    """The window length (default: the model's N) and stride, checked against what the model takes."""
    model_length = default_max_seq_len(model, tokenizer)
    max_seq_length = max_seq_length or model_length
    if max_seq_length > model_length:
        raise ValueError(
            f"--max_seq_length {max_seq_length} exceeds what the model takes (N = {model_length}); use at most "
            f"{model_length}, or a checkpoint converted to a longer N."
        )
    if not 0 <= doc_stride < max_seq_length:
        raise ValueError(f"--doc_stride must be in [0, max_seq_length = {max_seq_length}), got {doc_stride}.")
    return max_seq_length, doc_stride


def _data_source(config: QARunConfig, file: str | None, option: str) -> str:
    """The option that names a split's data, for messages: `--train_file PATH` or `--dataset_name NAME`."""
    return f"{option} {file}" if file else f"--dataset_name {config.dataset_name}"


def _load_split(config: QARunConfig, file: str | None, split: str, limit: int | None):
    if file:
        dataset = load_qa_dataset(file, split=split)
    else:
        dataset = load_qa_dataset(
            config.dataset_name, split, config_name=config.dataset_config_name, mrqa_subset=config.mrqa_subset
        )
    return dataset if limit is None else dataset.select(range(min(limit, len(dataset))))


@dataclass
class _QAData:
    train_examples: datasets.Dataset | None = None
    train_features: datasets.Dataset | None = None
    eval_examples: datasets.Dataset | None = None
    eval_features: datasets.Dataset | None = None


def _training_examples(config: QARunConfig, feature_kwargs: dict, data: _QAData, summary: dict) -> None:
    examples = _load_split(config, config.train_file, config.train_split, config.max_train_samples)
    examples, alignment = realign_answers(examples)
    logger.info(
        f"Training answers: {alignment['realigned']} re-aligned to their text, {alignment['dropped']} dropped "
        f"(text not in the context), {alignment['removed_questions']} question(s) skipped (no answer left)."
    )
    source = _data_source(config, config.train_file, "--train_file")
    check_question_lengths(examples["id"], examples["question"], name=source, **feature_kwargs)
    data.train_examples = examples
    summary["answer_alignment"] = alignment


def _evaluation_examples(config: QARunConfig, feature_kwargs: dict, data: _QAData) -> None:
    examples = _load_split(config, config.validation_file, config.validation_split, config.max_eval_samples)
    source = _data_source(config, config.validation_file, "--validation_file")
    if config.version_2_with_negative is False and has_impossible_questions(examples):
        raise ValueError(
            f"{source} has questions without an answer (SQuAD 2.0), which cannot be scored as SQuAD 1.1: pass "
            "--version_2_with_negative True, or leave it out (detected from the data)."
        )
    check_question_lengths(examples["id"], examples["question"], name=source, **feature_kwargs)
    data.eval_examples = examples


def _training_data(config: QARunConfig, feature_kwargs: dict, data: _QAData, summary: dict) -> None:
    examples = data.train_examples
    sampling = {"negative_window_rate": config.negative_window_rate, "seed": config.seed}
    data.train_features = examples.map(
        prepare_train_features,
        batched=True,
        remove_columns=examples.column_names,
        fn_kwargs={**feature_kwargs, **sampling},
        num_proc=config.preprocessing_num_workers,
        desc="Training windows",
    )
    negatives = sum(start == 0 for start in data.train_features["start_positions"])  # the null token is CLS, token 0
    summary.update(
        train_examples=len(examples),
        train_features=len(data.train_features),
        train_null_features=negatives,
        negative_window_rate=config.negative_window_rate,
    )


def _evaluation_data(config: QARunConfig, feature_kwargs: dict, data: _QAData, summary: dict) -> None:
    examples = data.eval_examples
    features = examples.map(
        prepare_eval_features,
        batched=True,
        remove_columns=examples.column_names,
        fn_kwargs=feature_kwargs,
        num_proc=config.preprocessing_num_workers,
        desc="Evaluation windows",
    )
    # Longest windows first: batches of similar lengths pad little (predictions are grouped by example_id, so the
    # order of windows does not matter).
    lengths = [len(input_ids) for input_ids in features["input_ids"]]
    data.eval_features = features.select(sorted(range(len(lengths)), key=lambda i: -lengths[i]))
    summary.update(eval_examples=len(examples), eval_features=len(data.eval_features))


def batch_order_seed(seed: int, epoch: int) -> int:
    """The seed of the batch order of one epoch: distinct for every (seed, epoch) pair, so that no two seeds of a
    recipe share an epoch's order (`seed + epoch` would give seed 1's first epoch the order of seed 0's second)."""
    return int.from_bytes(hashlib.sha256(f"batch-order:{seed}:{epoch}".encode()).digest()[:8], "big")


def _train_dataloader(config: QARunConfig, features: datasets.Dataset, collator) -> tuple[DataLoader, torch.Generator]:
    """Shuffled batches, or with `group_by_length` batches of similar lengths (transformers' LengthGroupedSampler:
    random mega-batches sorted by length), which pad far less. The generator is reseeded every epoch, so a resumed
    run sees the same order."""
    generator = torch.Generator()
    if config.group_by_length:
        lengths = [len(input_ids) for input_ids in features["input_ids"]]
        sampler = LengthGroupedSampler(config.per_device_train_batch_size, lengths=lengths, generator=generator)
    else:
        sampler = torch.utils.data.RandomSampler(features, generator=generator)
    loader = DataLoader(features, sampler=sampler, collate_fn=collator, batch_size=config.per_device_train_batch_size)
    return loader, generator


# ---------------------------------------------------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------------------------------------------------


@dataclass
class _Training:
    """The prepared objects and the schedule of a fine-tuning run."""

    config: QARunConfig
    accelerator: Accelerator
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: object
    dataloader: DataLoader
    generator: torch.Generator
    steps_per_epoch: int
    max_train_steps: int
    num_epochs: int
    metrics: MetricsLog | None = None
    completed_steps: int = 0
    logged_losses: list[float] = field(default_factory=list)  # the step losses since the last metrics record
    run_args: dict = field(default_factory=dict)  # what checkpoints record of the run (`_run_record`)
    distillation: "_Distillation | None" = None  # task distillation (`--teacher_model_name_or_path`)
    objective_block_size: int | None = None  # the blocks of the per-block objective; None: the window objective


def _objective_block_size(summary: dict) -> int | None:
    """The block size of the per-block objective, or None for the window objective (the model's own loss)."""
    return summary["window_block_size"] if summary["qa_objective"] == "per_block" else None


def _outputs_and_loss(model, batch: dict, block_size: int | None, distillation: "_Distillation | None" = None):
    """The model's outputs on `batch` and the loss of its labels: the model's own (one softmax over the window) when
    `block_size` is None, else the per-block objective over blocks of `block_size` (`per_block_span_loss`); with
    `distillation`, mixed with the distillation loss over the same softmaxes (`span_distillation_loss`)."""
    batch = dict(batch)
    windows = batch.pop(FEATURE_INDEX, None)
    if block_size is None:
        outputs = model(**batch)
        loss = outputs.loss
    else:
        labels = ("start_positions", "end_positions")
        outputs = model(**{name: value for name, value in batch.items() if name not in labels})
        loss = per_block_span_loss(
            outputs.start_logits, outputs.end_logits, *(batch[name] for name in labels), block_size,
            batch.get("attention_mask"),
        )  # fmt: skip
    if distillation is not None:
        length = outputs.start_logits.shape[1]
        teacher_start, teacher_end = distillation.logits.batch(windows, length, outputs.start_logits.device)
        kd = span_distillation_loss(
            outputs.start_logits, outputs.end_logits, teacher_start, teacher_end, batch.get("attention_mask"),
            distillation.temperature, block_size,
        )  # fmt: skip
        loss = distillation.alpha * kd + (1 - distillation.alpha) * loss
    return outputs, loss


@dataclass
class _Distillation:
    logits: TeacherLogits
    temperature: float
    alpha: float


def _teacher_logits(config: QARunConfig, accelerator: Accelerator, features, collator, block_size) -> TeacherLogits:
    """The teacher's logits over the training windows: read from `--teacher_logits` where it exists, else computed
    with `--teacher_model_name_or_path` (and written to `--teacher_logits` when given)."""
    if config.teacher_logits and Path(config.teacher_logits).is_file():
        logger.info(f"Teacher logits read from {config.teacher_logits}.")
        return TeacherLogits.load(config.teacher_logits, features, block_size)
    teacher = AutoModelForQuestionAnswering.from_pretrained(
        config.teacher_model_name_or_path, trust_remote_code=config.trust_remote_code
    )
    logits = TeacherLogits.compute(
        teacher, features, collator, block_size, config.per_device_eval_batch_size, accelerator.device
    )
    if config.teacher_logits and accelerator.is_main_process:
        logits.save(config.teacher_logits)
        logger.info(f"Teacher logits written to {config.teacher_logits}.")
    return logits


def _set_up_training(config: QARunConfig, accelerator: Accelerator, model, dataloader, generator) -> _Training:
    optimizer = create_optimizer(model, config.learning_rate, config.weight_decay)
    model, optimizer, dataloader = accelerator.prepare(model, optimizer, dataloader)
    steps_per_epoch = math.ceil(len(dataloader) / config.gradient_accumulation_steps)
    max_train_steps = config.max_train_steps or math.ceil(config.num_train_epochs * steps_per_epoch)
    warmup = warmup_steps(max_train_steps, config.warmup_ratio)
    scheduler = create_scheduler(accelerator, optimizer, max_train_steps, warmup)
    num_epochs = math.ceil(max_train_steps / steps_per_epoch)
    return _Training(
        config, accelerator, model, optimizer, scheduler, dataloader, generator,
        steps_per_epoch, max_train_steps, num_epochs,
    )  # fmt: skip


def _train(training: _Training, resume_from: Path | None, summary: dict, after_epoch=None) -> None:
    """The training loop: resumes where `resume_from` stopped, stops at `max_train_steps` (checked before a step).
    `after_epoch(epoch)`, when given, runs after every epoch but the last (an evaluation)."""
    config, accelerator = training.config, training.accelerator
    state = load_checkpoint(accelerator, resume_from) if resume_from is not None else None
    training.completed_steps = state["step"] if state is not None else 0
    training.metrics = MetricsLog(Path(config.output_dir) / METRICS_FILE, accelerator, state)
    first_epoch, steps_into_epoch = divmod(training.completed_steps, training.steps_per_epoch)
    if state is not None:
        logger.info(f"Resumed from {resume_from} after {training.completed_steps} steps.")
    summary.update(
        num_epochs=training.num_epochs, max_train_steps=training.max_train_steps, learning_rate=config.learning_rate
    )
    logger.info(
        f"Training: {summary['train_features']} windows, {training.num_epochs} epoch(s), {training.max_train_steps} "
        f"steps of {config.per_device_train_batch_size} x {accelerator.num_processes} process(es) x "
        f"{config.gradient_accumulation_steps} accumulation."
    )
    bar = tqdm(
        total=training.max_train_steps,
        initial=training.completed_steps,
        desc="Training",
        disable=not accelerator.is_local_main_process,
    )
    started = time.perf_counter()
    for epoch in range(first_epoch, training.num_epochs):
        if training.completed_steps >= training.max_train_steps:
            break
        training.model.train()
        training.generator.manual_seed(batch_order_seed(config.seed, epoch))
        batches = training.dataloader
        if epoch == first_epoch and steps_into_epoch:
            skip = steps_into_epoch * config.gradient_accumulation_steps
            batches = accelerator.skip_first_batches(training.dataloader, skip)
        _train_epoch(training, epoch, batches, bar)
        if after_epoch is not None and training.completed_steps < training.max_train_steps:
            after_epoch(epoch)
        if config.checkpointing_steps == "epoch":
            _save(training, epoch)
    bar.close()
    summary.update(completed_steps=training.completed_steps, train_seconds=round(time.perf_counter() - started, 1))


def _train_epoch(training: _Training, epoch: int, batches, bar) -> None:
    config, accelerator, model = training.config, training.accelerator, training.model
    checkpoint_every = _checkpoint_every(config.checkpointing_steps)
    step_losses = []
    for batch in batches:
        if training.completed_steps >= training.max_train_steps:
            break
        micro_batch = len(step_losses)
        torch.manual_seed(dropout_seed(config.seed, training.completed_steps, accelerator.process_index, micro_batch))
        with accelerator.accumulate(model):
            _, loss = _outputs_and_loss(model, batch, training.objective_block_size, training.distillation)
            accelerator.backward(loss)
            step_losses.append(loss.detach().float())
            if accelerator.sync_gradients:  # the last micro-batch of a step: check the loss before the update
                step_loss = accelerator.reduce(torch.stack(step_losses).mean(), reduction="mean").item()
                check_finite(accelerator, config.output_dir, training.completed_steps + 1, step_loss)
            training.optimizer.step()
            if accelerator.sync_gradients:
                step_scheduler(accelerator, training.scheduler)
            training.optimizer.zero_grad()
        if not accelerator.sync_gradients:
            continue
        training.completed_steps += 1
        training.logged_losses.append(step_loss)
        step_losses = []
        bar.update(1)
        if training.completed_steps % config.logging_steps == 0:
            lr, loss = training.scheduler.get_last_lr()[0], sum(training.logged_losses) / len(training.logged_losses)
            bar.set_postfix(loss=f"{loss:.4f}")
            training.metrics.log({"step": training.completed_steps, "epoch": epoch, "loss": loss, "lr": lr})
            logger.info(f"step {training.completed_steps}: loss {loss:.4f}, lr {lr:.2e}")
            training.logged_losses = []
        if isinstance(checkpoint_every, int) and training.completed_steps % checkpoint_every == 0:
            _save(training, epoch)


def _save(training: _Training, epoch: int) -> None:
    trainer_state = {
        "epoch": epoch,
        "metrics_lines": training.metrics.lines,
        "run_args": training.run_args,
    }
    config = training.config
    save_checkpoint(
        training.accelerator, config.output_dir, training.completed_steps, trainer_state, config.save_total_limit
    )


def _save_model(config: QARunConfig, accelerator: Accelerator, model, tokenizer, summary: dict) -> None:
    """`output_dir/model`: the fine-tuned model, its tokenizer and its model card, in one atomic folder."""
    accelerator.wait_for_everyone()
    state_dict = accelerator.get_state_dict(model)
    if accelerator.is_main_process:
        unwrapped = accelerator.unwrap_model(model)
        model_dir = save_atomically(
            Path(config.output_dir) / MODEL_DIR,
            lambda folder: unwrapped.save_pretrained(folder, state_dict=state_dict),
            tokenizer.save_pretrained,
            lambda folder: _write_model_card(config, accelerator, unwrapped.config, folder, summary),
        )
        logger.info(f"Saved the fine-tuned model to {model_dir}.")


def _write_model_card(config: QARunConfig, accelerator: Accelerator, model_config, folder: Path, results) -> None:
    """The card of the fine-tuned model (`README.md`), with the run's evaluation once it has one."""
    training_log = read_metrics(Path(config.output_dir) / METRICS_FILE)
    write_model_card(qa_model_card(config, model_config, accelerator, results, training_log), folder)


# ---------------------------------------------------------------------------------------------------------------------
# Evaluation
# ---------------------------------------------------------------------------------------------------------------------


def _eval_loop(
    accelerator, model, dataloader, block_size: int | None
) -> tuple[list[np.ndarray], list[np.ndarray], float]:
    """Start/end logits of every window, in dataset order, gathered from all processes, and the mean loss over the
    windows (their labels: the answer's tokens, or the null token; the per-block objective's with `block_size`)."""
    model.eval()
    starts, ends = [], []
    loss_sum, windows = torch.zeros(()), 0
    for batch in tqdm(dataloader, desc="Evaluating", disable=not accelerator.is_local_main_process):
        with torch.no_grad():
            outputs, loss = _outputs_and_loss(model, batch, block_size)
        batch_windows = accelerator.gather_for_metrics(batch["input_ids"][:, :1]).shape[0]
        loss_sum += accelerator.reduce(loss.detach().float(), reduction="mean").cpu() * batch_windows
        windows += batch_windows
        # Batches are padded per process: pad to a common length before gathering (the padding is never read).
        start = accelerator.pad_across_processes(outputs.start_logits.float(), dim=1, pad_index=-1e4)
        end = accelerator.pad_across_processes(outputs.end_logits.float(), dim=1, pad_index=-1e4)
        start, end = accelerator.gather_for_metrics((start, end))
        starts.extend(start.cpu().numpy())
        ends.extend(end.cpu().numpy())
    return starts, ends, float(loss_sum) / max(windows, 1)


@dataclass
class _Scored:
    """The predictions of one evaluation under every window scoring rule, and their metrics."""

    metrics: dict  # the run's rule's metrics, with `scores_by_window_scoring` (every rule's)
    implementation: str  # which SQuAD metric computed them
    answers_by_rule: dict[str, dict[str, str]]
    predictions: list[dict]  # the run's rule's, in the `evaluate` format
    nbest: dict


def _score(config: QARunConfig, data: _QAData, start_logits, end_logits, version_2, window_scoring) -> _Scored:
    """Scores the predictions under the run's window scoring rule and, for comparison, under every other rule."""
    metric, implementation = load_squad_metric(version_2)
    references = squad_references(data.eval_examples)
    by_rule, answers_by_rule = {}, {}
    for rule in WINDOW_SCORING_RULES:
        rule_predictions, rule_nbest = postprocess_qa_predictions(
            data.eval_examples,
            data.eval_features,
            start_logits,
            end_logits,
            version_2=version_2,
            n_best_size=config.n_best_size,
            max_answer_length=config.max_answer_length,
            null_score_diff_threshold=config.null_score_diff_threshold,
            window_scoring=rule,
        )
        # Plain numbers for JSON (the Hub modules may return numpy scalars).
        by_rule[rule] = {
            key: int(v) if isinstance(v, numbers.Integral) else float(v)
            for key, v in metric.compute(predictions=rule_predictions, references=references).items()
        }
        answers_by_rule[rule] = {p["id"]: p["prediction_text"] for p in rule_predictions}
        if rule == window_scoring:
            predictions, nbest = rule_predictions, rule_nbest
    metrics = {**by_rule[window_scoring], "scores_by_window_scoring": by_rule}
    return _Scored(metrics, implementation, answers_by_rule, predictions, nbest)


def _write_evaluation(config: QARunConfig, scored: _Scored, version_2: bool, summary: dict) -> None:
    output_dir, rule = Path(config.output_dir), summary["window_scoring"]
    write_json_atomically(output_dir / "eval_predictions.json", scored.answers_by_rule[rule])
    write_json_atomically(output_dir / "eval_predictions_by_window_scoring.json", scored.answers_by_rule, indent=None)
    if version_2:
        write_json_atomically(
            output_dir / "eval_null_odds.json", {p["id"]: p["no_answer_probability"] for p in scored.predictions}
        )
    if config.write_nbest:
        write_json_atomically(output_dir / "eval_nbest_predictions.json", scored.nbest)
    write_json_atomically(
        output_dir / "eval_metrics.json", {**scored.metrics, "metric_implementation": scored.implementation, **summary}
    )
    logger.info(f"Evaluation ({scored.implementation}): {json.dumps(scored.metrics)}")


def _predict(config: QARunConfig, accelerator, model, data: _QAData, collator, summary) -> _Scored | None:
    """Runs the model on the evaluation windows and scores its answers (on the main process; None elsewhere)."""
    loader = DataLoader(
        data.eval_features.remove_columns(list(EVAL_METADATA_COLUMNS)),
        collate_fn=collator,
        batch_size=config.per_device_eval_batch_size,
    )
    started = time.perf_counter()
    block_size = _objective_block_size(summary)
    start_logits, end_logits, loss = _eval_loop(accelerator, model, accelerator.prepare(loader), block_size)
    summary["eval_seconds"] = round(time.perf_counter() - started, 1)
    if not accelerator.is_main_process:
        return None
    scored = _score(
        config, data, start_logits, end_logits, summary["version_2_with_negative"], summary["window_scoring"]
    )
    scored.metrics["eval_loss"] = loss
    return scored


def _evaluate(config: QARunConfig, accelerator, model, data: _QAData, collator, summary) -> dict:
    """The evaluation of the final model: its predictions and metrics files (metrics on the main process)."""
    scored = _predict(config, accelerator, model, data, collator, summary)
    if scored is None:
        return {}
    _write_evaluation(config, scored, summary["version_2_with_negative"], summary)
    return scored.metrics


def _log_evaluation(training: _Training, epoch: int, metrics: dict) -> None:
    """An evaluation record in metrics.jsonl: `eval_loss`, `eval_exact_match` and `eval_f1` at the step it was made."""
    exact_match = metrics.get("exact_match", metrics.get("exact"))
    record = {"step": training.completed_steps, "epoch": epoch, "eval_loss": metrics["eval_loss"]}
    record.update(eval_exact_match=exact_match, eval_f1=metrics["f1"])
    training.metrics.log(record)
    logger.info(f"epoch {epoch} evaluation: {json.dumps(record)}")


# ---------------------------------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------------------------------


def _prepare_data(config: QARunConfig, accelerator: Accelerator, model, tokenizer) -> tuple[_QAData, dict]:
    """The training and evaluation windows, and the run summary so far (with whether the empty answer is allowed)."""
    max_seq_length, doc_stride = resolve_window_lengths(model, tokenizer, config.max_seq_length, config.doc_stride)
    processes = accelerator.num_processes
    logger.info(f"Windows of {max_seq_length} tokens overlapping by {doc_stride}; {processes} process(es).")
    window_scoring = check_window_scoring(config.window_scoring or model_window_scoring(model.config))
    layout_option = config.window_layout or default_window_layout(model.config, max_seq_length)
    window_layout, block_size = resolve_window_layout(model.config, layout_option)
    if block_size is not None:
        logger.info(f"Window layout {window_layout}: blocks of {block_size} tokens, each starting with the question.")
    if layout_option and not config.window_layout:
        logger.info(
            f"--window_layout {window_layout} by default: the model has block-relative positions and windows of "
            f"{max_seq_length} tokens span several blocks (--window_layout question_first for the other layout)."
        )
    qa_objective = resolve_qa_objective(model.config, config.qa_objective, window_layout)
    if qa_objective == "per_block":
        check_block_null_tokens(tokenizer)
        logger.info(f"Objective per_block: a start/end softmax over each block of {block_size} tokens.")
    summary: dict = {
        "model": config.model_name_or_path,
        "max_seq_length": max_seq_length,
        "doc_stride": doc_stride,
        "window_scoring": window_scoring,
        "window_layout": window_layout,
        "qa_objective": qa_objective,
    }
    if block_size is not None:
        summary["window_block_size"] = block_size
    data = _QAData()
    feature_kwargs = {
        "tokenizer": tokenizer,
        "max_seq_length": max_seq_length,
        "doc_stride": doc_stride,
        "layout": window_layout,
        "block_size": block_size,
    }
    with accelerator.main_process_first():
        # Every question is read and checked before any window is cut.
        if config.do_train:
            _training_examples(config, feature_kwargs, data, summary)
        if config.do_eval:
            _evaluation_examples(config, feature_kwargs, data)
        if config.do_train:
            _training_data(config, feature_kwargs, data, summary)
        if config.do_eval:
            _evaluation_data(config, feature_kwargs, data, summary)
    version_2 = config.version_2_with_negative
    if version_2 is None:
        version_2 = any(has_impossible_questions(e) for e in (data.train_examples, data.eval_examples) if e is not None)
    summary["version_2_with_negative"] = version_2
    return data, summary


def _trained_qa_settings(model_config, summary: dict) -> dict:
    """What the fine-tuned model records (`config.question_answering`), its pipeline's defaults: the window scoring
    rule it is trained for and, unless it is the default `question_first`, the window layout it is trained on with
    its block size (left out for `question_first`, so such a model's config is what it always was); and the
    objective it was fine-tuned with (`qa_objective`), which a run continuing from it takes by default."""
    settings = {**qa_settings(model_config), "window_scoring": summary["window_scoring"]}
    settings[QA_OBJECTIVE_KEY] = summary["qa_objective"]
    settings.pop("window_layout", None)
    settings.pop("block_size", None)
    if summary["window_layout"] != DEFAULT_WINDOW_LAYOUT:
        settings.update(window_layout=summary["window_layout"], block_size=summary["window_block_size"])
    return settings


def _check_qa_objective(config: QARunConfig) -> None:
    """`--qa_objective`, and the window layout it needs, before any work: from the options, or, where they leave
    the model's recorded defaults to decide, from the model's config."""
    if config.qa_objective is not None:
        check_qa_objective(config.qa_objective)
    blocks = "question_prefixed_blocks"
    if config.qa_objective == "window" or config.window_layout == blocks:
        return  # compatible whatever the model records
    if config.qa_objective is None and config.window_layout is None:
        return  # the model's recorded pair: a model records the layout it was fine-tuned on with its objective
    model_config = AutoConfig.from_pretrained(config.model_name_or_path, trust_remote_code=config.trust_remote_code)
    max_seq_length = config.max_seq_length or getattr(model_config, "max_sequence_length", 0)
    layout_option = config.window_layout or default_window_layout(model_config, max_seq_length)
    window_layout, _ = resolve_window_layout(model_config, layout_option)
    resolve_qa_objective(model_config, config.qa_objective, window_layout)


def default_window_layout(model_config, max_seq_length: int) -> str | None:
    """The window layout a run takes without `--window_layout` where the model records none:
    `question_prefixed_blocks` for a BlockBERT model with block-relative positions whose windows of `max_seq_length`
    tokens span more than one block (measured far better there, results/qa_recipe); None (the model's recorded layout,
    else question_first) otherwise."""
    if "window_layout" in qa_settings(model_config) or not getattr(model_config, "block_relative_positions", False):
        return None
    block_size = getattr(model_config, "effective_block_size", None)
    return BLOCK_RELATIVE_WINDOW_LAYOUT if block_size and max_seq_length > block_size else None


def _check_run_options(config: QARunConfig) -> None:
    """The values of the training and evaluation options, and the inputs they name, before any work. A run that
    would take no step (0 epochs or steps, learning rate 0) is refused: it would save its starting weights as
    fine-tuned."""
    if config.do_train:
        if config.train_file is None and config.dataset_name is None:
            raise ValueError("--do_train needs --train_file or --dataset_name.")
        check_at_least(1, {"--max_train_steps": config.max_train_steps}, " (leave it out to train --num_train_epochs)")
        if config.max_train_steps is None:
            check_positive({"--num_train_epochs": config.num_train_epochs}, " (or give --max_train_steps)")
        check_positive({"--learning_rate": config.learning_rate})
        check_in_range({"--warmup_ratio": config.warmup_ratio}, 0.0, 1.0)
        check_at_least(0, {"--weight_decay": config.weight_decay})
        training_counts = {
            "--per_device_train_batch_size": config.per_device_train_batch_size,
            "--gradient_accumulation_steps": config.gradient_accumulation_steps,
            "--logging_steps": config.logging_steps,
            "--max_train_samples": config.max_train_samples,
        }
        check_at_least(1, training_counts)
        _check_distillation_options(config)
    if config.do_eval:
        if config.validation_file is None and config.dataset_name is None:
            raise ValueError("--do_eval needs --validation_file or --dataset_name.")
        evaluation_counts = {
            "--per_device_eval_batch_size": config.per_device_eval_batch_size,
            "--n_best_size": config.n_best_size,
            "--max_answer_length": config.max_answer_length,
            "--max_eval_samples": config.max_eval_samples,
        }
        check_at_least(1, evaluation_counts)
    check_at_least(
        1, {"--max_seq_length": config.max_seq_length, "--preprocessing_num_workers": config.preprocessing_num_workers}
    )
    check_at_least(0, {"--doc_stride": config.doc_stride})
    files = {
        "--train_file": config.train_file if config.do_train else None,
        "--validation_file": config.validation_file if config.do_eval else None,
    }
    models = {"--model_name_or_path": config.model_name_or_path, "--tokenizer_name": config.tokenizer_name}
    check_input_paths(files, models)


def _check_distillation_options(config: QARunConfig) -> None:
    check_in_range({"--distillation_alpha": config.distillation_alpha}, 0.0, 1.0)
    check_positive({"--distillation_temperature": config.distillation_temperature})
    cached = config.teacher_logits is not None and Path(config.teacher_logits).is_file()
    if config.teacher_logits and not cached and not config.teacher_model_name_or_path:
        raise ValueError(
            f"--teacher_logits {config.teacher_logits} does not exist: give --teacher_model_name_or_path to compute "
            "it (it is written there), or the path of a file an earlier run wrote."
        )
    if config.teacher_model_name_or_path and not cached:
        check_input_paths({}, {"--teacher_model_name_or_path": config.teacher_model_name_or_path})


def _run_record(config: QARunConfig) -> dict:
    """What `run_args.json` and every checkpoint record of the run: its arguments, and the content digests of its local
    training data, so that a resume refuses a training file changed under the same path."""
    training_inputs = {"--train_file": config.train_file, "--dataset_name": config.dataset_name}
    return {**run_arguments(config), INPUT_DIGESTS: input_digests(training_inputs if config.do_train else {})}


def _start(config: QARunConfig) -> tuple[Accelerator, Path | None, dict]:
    """Checks the options, the launch and the output folder before any work; returns the accelerator, the
    checkpoint to resume and the run's record (`_run_record`)."""
    if not (config.do_train or config.do_eval):
        raise ValueError("Nothing to do: pass --do_train and/or --do_eval.")
    if config.window_scoring is not None:
        check_window_scoring(config.window_scoring)
    if config.window_layout is not None:
        check_window_layout(config.window_layout)
    _check_run_options(config)
    _check_qa_objective(config)
    if not 0.0 <= config.negative_window_rate <= 1.0:
        raise ValueError(f"--negative_window_rate must be in [0, 1], got {config.negative_window_rate}.")
    _checkpoint_every(config.checkpointing_steps)
    if config.eval_strategy == "epoch" and not (config.do_train and config.do_eval):
        raise ValueError("--eval_strategy epoch evaluates while training: add --do_train and --do_eval.")
    dropout = config.attention_probs_dropout_prob
    if dropout is not None and not 0.0 <= dropout < 1.0:
        raise ValueError(f"--attention_probs_dropout_prob must be in [0, 1), got {dropout}.")
    resume = checkpoint_to_resume(config.resume, config.resume_from_checkpoint)
    if resume and not config.do_train:
        raise ValueError("--resume / --resume_from_checkpoint continue a training run: add --do_train.")
    if config.push_to_hub and not config.do_train:
        raise ValueError("--push_to_hub uploads the fine-tuned model: add --do_train.")
    if config.push_to_hub:
        hub_repo_id(config.hub_model_id, config.output_dir)
    accelerator = Accelerator(
        mixed_precision=config.mixed_precision,
        gradient_accumulation_steps=config.gradient_accumulation_steps,
        log_with=trackers(config.report_to),
        project_config=ProjectConfiguration(project_dir=config.output_dir),
    )
    check_launch(accelerator, "examples/run_qa.py")
    warn_emulated_bf16(accelerator, "examples/run_qa.py")
    run_args = _run_record(config)
    inputs = {
        "--model_name_or_path": config.model_name_or_path,
        "--tokenizer_name": config.tokenizer_name,
        "--train_file": config.train_file,
        "--validation_file": config.validation_file,
    }
    resume_from = check_output_dir(
        config.output_dir,
        run_args,
        QA_OUTPUTS,
        resume_from=resume,
        overwrite=config.overwrite_output_dir,
        inputs=inputs,
    )
    claim_output_dir(accelerator, config.output_dir, run_args, QA_OUTPUTS, overwrite=config.overwrite_output_dir)
    return accelerator, resume_from, run_args


def run_qa(config: QARunConfig) -> dict:
    """Fine-tunes (`do_train`) and/or evaluates (`do_eval`) an extractive QA model; writes the fine-tuned model with
    its model card (`README.md`, with the evaluation when there is one) to `output_dir/model`, checkpoints to
    `output_dir/checkpoints/step_N`, the training log to `metrics.jsonl`, and `eval_predictions.json`,
    `eval_metrics.json` (and for SQuAD 2.0 `eval_null_odds.json`) to `output_dir`. Returns the metrics and a summary
    of the run (on the main process; empty elsewhere)."""
    accelerator, resume_from, run_args = _start(config)
    results = _run(config, accelerator, resume_from, run_args)
    end_run(accelerator)  # after _run returned: no reference to the prepared model is left here
    return results


def _run(config: QARunConfig, accelerator: Accelerator, resume_from: Path | None, run_args: dict) -> dict:
    set_seed(config.seed)
    if not accelerator.is_main_process:
        datasets.utils.logging.set_verbosity_error()
        transformers.utils.logging.set_verbosity_error()
    model, tokenizer = _load_model_and_tokenizer(config)
    if config.gradient_checkpointing and config.do_train:
        enable_gradient_checkpointing(model)
    data, summary = _prepare_data(config, accelerator, model, tokenizer)
    collator = DataCollatorWithPadding(tokenizer)  # pads each batch to its longest window, on the right
    if config.do_train:
        setattr(model.config, QA_SETTINGS_ATTRIBUTE, _trained_qa_settings(model.config, summary))
        distillation = None
        if config.teacher_model_name_or_path or config.teacher_logits:
            logits = _teacher_logits(config, accelerator, data.train_features, collator, _objective_block_size(summary))
            distillation = _Distillation(logits, config.distillation_temperature, config.distillation_alpha)
            data.train_features = data.train_features.add_column(FEATURE_INDEX, list(range(len(data.train_features))))
            summary.update(
                teacher=config.teacher_model_name_or_path or config.teacher_logits,
                distillation_temperature=config.distillation_temperature,
                distillation_alpha=config.distillation_alpha,
            )
        dataloader, generator = _train_dataloader(config, data.train_features, collator)
        training = _set_up_training(config, accelerator, model, dataloader, generator)
        training.objective_block_size = _objective_block_size(summary)
        training.run_args = run_args
        training.distillation = distillation

        def evaluate_epoch(epoch: int) -> None:
            scored = _predict(config, accelerator, training.model, data, collator, summary)
            if scored is not None:
                _log_evaluation(training, epoch, scored.metrics)

        accelerator.init_trackers("blockbert_qa", config={k: v for k, v in run_args.items() if _is_scalar(v)})
        _train(training, resume_from, summary, evaluate_epoch if config.eval_strategy == "epoch" else None)
        model = training.model
        _save_model(config, accelerator, model, tokenizer, summary)
    else:
        # Inference only: no DistributedDataParallel wrapper, whose reducer would hold the process group to the end.
        model = accelerator.prepare_model(model, evaluation_mode=True)
    metrics = _evaluate(config, accelerator, model, data, collator, summary) if config.do_eval else {}
    if config.do_train and metrics and config.eval_strategy == "epoch":
        _log_evaluation(training, training.num_epochs - 1, metrics)  # the last epoch's evaluation is the final one
    if config.do_train and metrics:  # the saved model's card gets the evaluation (metrics: on the main process)
        model_config = accelerator.unwrap_model(model).config
        _write_model_card(
            config, accelerator, model_config, Path(config.output_dir) / MODEL_DIR, {**metrics, **summary}
        )
    if config.push_to_hub and accelerator.is_main_process:  # the finished folder, its card final
        repo_id = hub_repo_id(config.hub_model_id, config.output_dir)
        summary["hub_repo_id"] = push_folder_to_hub(Path(config.output_dir) / MODEL_DIR, repo_id)
    return {**metrics, **summary} if accelerator.is_main_process else {}


def _is_scalar(value) -> bool:
    """What a tracker's hyperparameters take (TensorBoard's hparams: numbers, strings and booleans)."""
    return isinstance(value, (int, float, str, bool))
