"""The options of a self-distillation run (`examples/distill_blockbert.py` parses them with `HfArgumentParser`)."""

from dataclasses import dataclass, field
from typing import Literal

from ..model_card import DEFAULT_LICENSE
from ..pretraining.arguments import WIKITEXT_HEADING
from ..runs import REPORT_TO_HELP, OutputLayout, check_at_least, check_in_range, check_input_paths, check_positive


DISTILLED_MODEL_DIR = "distilled_model"
RESULTS_FILE = "results.json"


@dataclass
class DistillationArguments:
    """Options of `examples/distill_blockbert.py`. Help texts go through argparse: write "percent", never a bare
    percent sign."""

    output_dir: str = field(metadata={"help": "checkpoints/, metrics.jsonl, results.json, distilled_model/"})
    model_name_or_path: str = field(
        metadata={
            "help": "the blockwise BlockBERT to distil (e.g. a converted checkpoint); the teacher is the same weights "
            "with full attention"
        }
    )
    # ---- data: as examples/run_mlm.py reads it
    train_files: list[str] | None = field(default=None, metadata={"help": "local .txt, .txt.gz or .jsonl files"})
    validation_files: list[str] | None = field(default=None, metadata={"help": "held-out files (same formats)"})
    dataset_name: str | None = field(default=None, metadata={"help": "hub dataset (needs network or a local cache)"})
    dataset_config_name: str | None = field(default=None, metadata={"help": "configuration of --dataset_name"})
    text_column: str = field(default="text", metadata={"help": "text field of .jsonl records / hub rows"})
    document_boundary: Literal["file", "blank_line", "heading"] = field(
        default="file", metadata={"help": "where a document ends (see blockbert_hf.train.pretraining.documents)"}
    )
    document_heading_regex: str = field(
        default=WIKITEXT_HEADING, metadata={"help": "with document_boundary=heading: a line that starts a document"}
    )
    validation_split_percentage: float = field(
        default=0.0, metadata={"help": "hold out this percentage of the training documents (without validation files)"}
    )
    max_eval_sequences: int | None = field(default=None, metadata={"help": "evaluate on the first K packed sequences"})
    # ---- the student and its targets
    max_seq_length: int | None = field(
        default=None,
        metadata={"help": "N of the sequences: the checkpoint's (checked where given; convert again for another N)"},
    )
    short_batch_every: int = field(
        default=0,
        metadata={
            "help": "every K-th step trains on sequences of the teacher's N, where its targets are exact rather than "
            "read from sliding windows (0: never; only where N exceeds the teacher's)"
        },
    )
    layer_weights: str = field(
        default="all",
        metadata={
            "help": "the weight of each layer's normalised MSE: all (1 each: their sum), last, or one comma-separated "
            "weight per layer"
        },
    )
    cosine_weight: float = field(default=1.0, metadata={"help": "the weight of the last layer's cosine distance"})
    train_embeddings: bool = field(
        default=False, metadata={"help": "train the embeddings too (frozen by default: they are the teacher's)"}
    )
    hidden_dropout_prob: float | None = field(default=None, metadata={"help": "default: the checkpoint's"})
    attention_probs_dropout_prob: float | None = field(default=None, metadata={"help": "default: the checkpoint's"})
    attn_implementation: str = field(default="sdpa", metadata={"help": "attention kernel: eager | sdpa"})
    # ---- batch and schedule
    tokens_per_batch: int = field(default=4096, metadata={"help": "B x N per optimizer step"})
    per_device_train_batch_size: int = field(default=4, metadata={"help": "sequences per forward pass"})
    per_device_eval_batch_size: int = 4
    max_train_steps: int | None = None
    max_train_tokens: int | None = field(default=None, metadata={"help": "budget in B x N tokens; sets the steps"})
    learning_rate: float = 1e-4
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    warmup_ratio: float = field(default=0.06, metadata={"help": "share of the steps with linear warmup"})
    seed: int = 0
    # ---- logging and checkpoints
    logging_steps: int = 10
    eval_steps: int | None = field(default=None, metadata={"help": "evaluate every K steps (always at the end)"})
    eval_before_training: bool = field(
        default=True, metadata={"help": "evaluate the starting model too, logged as step 0 in metrics.jsonl"}
    )
    checkpointing_steps: int | None = field(default=None, metadata={"help": "checkpoint every K steps"})
    save_total_limit: int | None = field(default=2, metadata={"help": "keep the newest K checkpoints"})
    resume: bool = field(default=False, metadata={"help": "continue from the latest checkpoint in output_dir"})
    resume_from_checkpoint: str | None = field(default=None, metadata={"help": "'latest' or a checkpoint folder"})
    stop_after_step: int | None = field(
        default=None, metadata={"help": "stop after this step (schedule unchanged) to resume later"}
    )
    report_to: Literal["auto", "tensorboard", "none"] = field(default="auto", metadata={"help": REPORT_TO_HELP})
    overwrite_output_dir: bool = field(
        default=False, metadata={"help": "replace the outputs of an earlier run in output_dir"}
    )
    license: str = field(
        default=DEFAULT_LICENSE,
        metadata={"help": "the license on the model card, a Hub license id such as apache-2.0 ('other' by default)"},
    )

    def training_steps(self) -> int:
        """The length of the schedule in optimizer steps."""
        if self.max_train_steps is not None:
            return self.max_train_steps
        if self.max_train_tokens is not None:
            return -(-self.max_train_tokens // self.tokens_per_batch)
        raise ValueError("Give the training length: --max_train_steps S or --max_train_tokens T (B x N tokens).")


# What a distillation run writes. Arguments that do not change the trained weights may differ when a run resumes.
DISTILLATION_OUTPUTS = OutputLayout(
    finished=(DISTILLED_MODEL_DIR, RESULTS_FILE),
    resume_safe=frozenset(
        {
            "output_dir",
            "logging_steps",
            "eval_steps",
            "eval_before_training",
            "checkpointing_steps",
            "save_total_limit",
            "resume",
            "resume_from_checkpoint",
            "stop_after_step",
            "report_to",
            "overwrite_output_dir",
            "license",
        }
    ),
)


def check_distillation_arguments(args: DistillationArguments) -> None:
    """Refuses, before any work, option values that cannot run as asked or would train nothing, and local inputs that
    do not exist."""
    args.training_steps()
    check_at_least(1, {"--max_train_steps": args.max_train_steps, "--max_train_tokens": args.max_train_tokens})
    check_positive({"--learning_rate": args.learning_rate, "--max_grad_norm": args.max_grad_norm})
    check_in_range({"--warmup_ratio": args.warmup_ratio}, 0.0, 1.0)
    check_in_range(
        {
            "--hidden_dropout_prob": args.hidden_dropout_prob,
            "--attention_probs_dropout_prob": args.attention_probs_dropout_prob,
        },
        0.0,
        1.0,
        high_included=False,
    )
    check_in_range({"--validation_split_percentage": args.validation_split_percentage}, 0.0, 100.0, False)
    check_at_least(
        0,
        {
            "--weight_decay": args.weight_decay,
            "--cosine_weight": args.cosine_weight,
            "--short_batch_every": args.short_batch_every,
            "--eval_steps": args.eval_steps,
            "--checkpointing_steps": args.checkpointing_steps,
        },
    )
    check_at_least(
        1,
        {
            "--max_seq_length": args.max_seq_length,
            "--tokens_per_batch": args.tokens_per_batch,
            "--per_device_train_batch_size": args.per_device_train_batch_size,
            "--per_device_eval_batch_size": args.per_device_eval_batch_size,
            "--logging_steps": args.logging_steps,
            "--stop_after_step": args.stop_after_step,
            "--max_eval_sequences": args.max_eval_sequences,
        },
    )
    check_input_paths(
        {"--train_files": args.train_files, "--validation_files": args.validation_files},
        {"--model_name_or_path": args.model_name_or_path},
    )
