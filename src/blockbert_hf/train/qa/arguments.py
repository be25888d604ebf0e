"""The options of a QA run (`QARunConfig`, which `examples/run_qa.py` parses) and their checks, made before any
work (`_check_config`); what a run writes into its output folder (`QA_OUTPUTS`)."""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from transformers import AutoConfig

from ...model.pipeline_question_answering import (
    WINDOW_SCORING_RULES,
    check_window_scoring,
    qa_settings,
    resolve_window_layout,
)
from ...model.question_answering_windows import WINDOW_LAYOUTS, check_window_layout
from ..model_card import DEFAULT_LICENSE
from ..runs import (
    GRADIENT_CHECKPOINTING_HELP,
    HUB_MODEL_ID_HELP,
    PUSH_TO_HUB_HELP,
    REPORT_TO_HELP,
    OutputLayout,
    check_at_least,
    check_in_range,
    check_input_paths,
    check_positive,
    checkpoint_to_resume,
    hub_repo_id,
)
from .objective import QA_OBJECTIVES, check_qa_objective, resolve_qa_objective


# Fine-tuning defaults: 4 epochs (the paper's), linear decay with 10 percent warmup, batch 32 and a learning rate to be
# picked on the dev set from this grid (the usual BERT/RoBERTa-base SQuAD settings).
LEARNING_RATE_GRID = (1e-5, 2e-5, 3e-5, 5e-5)
MODEL_DIR = "model"
# The default layout of a model with block-relative positions whose windows span several blocks, unless it records
# another (`default_window_layout`).
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
            "one block, else question_first; saved with a fine-tuned model"
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
    # ---- task distillation (blockbert_hf.train.qa.task_distillation)
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
    teacher_logits_only: bool = field(
        default=False,
        metadata={
            "help": "with --do_train: write --teacher_logits (computed with --teacher_model_name_or_path over this "
            "run's training windows) and stop without training, so that a later run needs the file, not the teacher"
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
            "help": f"the peak learning rate, to be picked on the dev set: {', '.join(map(str, LEARNING_RATE_GRID))} "
            "are the usual settings for BERT/RoBERTa-base"
        },
    )
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    max_grad_norm: float | None = field(
        default=None,
        metadata={
            "help": "clip the gradients' norm to this before each update (transformers' Trainer clips at 1.0); unset: "
            "no clipping, as runs recorded without this option trained"
        },
    )
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
        metadata={
            "help": "batch training windows of similar lengths (transformers' LengthGroupedSampler: less padding)"
        },
    )
    attn_implementation: str | None = field(
        default=None, metadata={"help": "eager, sdpa, flex_attention, ... (None: the model's)"}
    )
    attention_probs_dropout_prob: float | None = field(
        default=None,
        metadata={
            "help": "attention dropout while fine-tuning (None: the model's); with 0, PyTorch's SDPA runs its fused "
            "kernel, while any dropout makes it fall back to the slower unfused one"
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
    tokens span more than one block; None (the model's recorded layout, else question_first) otherwise."""
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
        check_positive({"--learning_rate": config.learning_rate, "--max_grad_norm": config.max_grad_norm})
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
    if config.teacher_logits_only:
        if not (config.teacher_logits and config.teacher_model_name_or_path):
            raise ValueError(
                "--teacher_logits_only writes the teacher's logits: give --teacher_model_name_or_path and "
                "--teacher_logits (the file to write)."
            )
        if cached:
            raise ValueError(
                f"--teacher_logits_only: {config.teacher_logits} exists already; delete it to compute it again."
            )
        if config.do_eval or config.push_to_hub:
            raise ValueError("--teacher_logits_only trains nothing: leave out --do_eval and --push_to_hub.")


def _check_config(config: QARunConfig) -> str | None:
    """Every option of the run, and the inputs they name, before any work; returns the checkpoint to resume from
    ("latest", a checkpoint folder, or None for a fresh run)."""
    if not (config.do_train or config.do_eval):
        raise ValueError("Nothing to do: pass --do_train and/or --do_eval.")
    if config.teacher_logits_only and not config.do_train:
        raise ValueError("--teacher_logits_only computes the logits over the training windows: add --do_train.")
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
    return resume
