"""The options of a pre-training run (`examples/run_mlm.py` parses them with `transformers.HfArgumentParser`)."""

import re
from dataclasses import dataclass, field
from typing import Literal

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
    hub_repo_id,
)


# " = Robert Boulter = " (stripped) starts a WikiText article; "= = Career = =" is a section, not a document.
WIKITEXT_HEADING = r"^= [^=].* =$"
FINAL_MODEL_DIR = "final_model"
TOKENIZER_DIR = "tokenizer"
RESULTS_FILE = "results.json"


DEFAULT_N = 512  # `max_seq_length` of a model trained from scratch, the paper's N


@dataclass
class PretrainingArguments:
    """Options of `examples/run_mlm.py`. Help texts go through argparse: write "percent", never a bare percent sign."""

    output_dir: str = field(metadata={"help": "checkpoints/, metrics.jsonl, results.json, final_model/, tokenizer/"})
    # ---- data
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
    # ---- tokenizer and model
    tokenizer_name: str | None = field(default=None, metadata={"help": "tokenizer folder (default: the model's)"})
    train_tokenizer_vocab_size: int | None = field(
        default=None, metadata={"help": "train a byte-level BPE tokenizer of this size on the training documents"}
    )
    model_name_or_path: str | None = field(default=None, metadata={"help": "BlockBERT checkpoint to start from"})
    config_name: str | None = field(default=None, metadata={"help": "BlockBERT config (json/folder) for from scratch"})
    max_seq_length: int | None = field(
        default=None,
        metadata={
            "help": "N, tokens per sequence. Default: the N of --model_name_or_path with the run's blockwise options "
            f"(e.g. 1024 for a checkpoint converted with --block_relative_positions --num_blocks 2), {DEFAULT_N} "
            "from scratch"
        },
    )
    num_hidden_layers: int | None = None
    hidden_size: int | None = None
    num_attention_heads: int | None = None
    intermediate_size: int | None = field(default=None, metadata={"help": "default 4 x hidden_size"})
    hidden_dropout_prob: float | None = None
    attention_probs_dropout_prob: float | None = None
    num_blocks: int | None = field(default=None, metadata={"help": "n, blocks per sequence"})
    block_size: int | None = field(default=None, metadata={"help": "b (default ceil(N / n))"})
    heads_per_shift: str | None = field(default=None, metadata={"help": "paper notation, e.g. 10:2 or 8:2:2"})
    attention_pattern: Literal["blockwise", "full", "sparse_fixed"] | None = field(
        default=None, metadata={"help": "default blockwise (or the checkpoint's)"}
    )
    block_relative_positions: bool = field(
        default=False,
        metadata={
            "help": "positions restart at every block, so N = n x b with b up to the checkpoint's position rows: "
            "N = 1024 as 2 blocks of 512 from a 512-position checkpoint (with --num_blocks 2 --max_seq_length "
            "1024). Off: the checkpoint's setting (a checkpoint that has them keeps them)"
        },
    )
    attn_implementation: str = field(default="sdpa", metadata={"help": "attention kernel: eager | sdpa"})
    sparse_prediction: bool = field(
        default=True,
        metadata={
            "help": "run the MLM head on the masked positions only while training (same loss, less time and "
            "memory); the saved model has it off"
        },
    )
    # ---- which parameters train
    train_only_mlm_head: bool = field(
        default=False,
        metadata={
            "help": "train the MLM head alone (its dense layer, layer norm and output bias) on the frozen encoder of "
            "--model_name_or_path, e.g. to give a converted encoder that has no MLM head a trained one before "
            "continuing MLM. The word embeddings, and the decoder weight tied to them, are part of the frozen encoder"
        },
    )
    freeze_word_embeddings: bool = field(
        default=False,
        metadata={
            "help": "keep the word embeddings, and the MLM decoder weight tied to them, as --model_name_or_path has "
            "them while the rest trains. Off by default: every parameter trains, as in pre-training"
        },
    )
    eval_before_training: bool = field(
        default=False, metadata={"help": "also evaluate the starting model, logged as step 0 in metrics.jsonl"}
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
    mixed_precision: Literal["no", "fp16", "bf16"] | None = field(
        default=None, metadata={"help": "None: accelerate's configuration"}
    )
    # ---- logging and checkpoints
    logging_steps: int = 10
    eval_steps: int | None = field(default=None, metadata={"help": "evaluate every K steps (always at the end)"})
    checkpointing_steps: int | None = field(default=None, metadata={"help": "checkpoint every K steps"})
    save_total_limit: int | None = field(default=2, metadata={"help": "keep the newest K checkpoints"})
    resume: bool = field(default=False, metadata={"help": "continue from the latest checkpoint in output_dir"})
    resume_from_checkpoint: str | None = field(default=None, metadata={"help": "'latest' or a checkpoint folder"})
    stop_after_step: int | None = field(
        default=None, metadata={"help": "stop after this step (schedule unchanged) to resume later"}
    )
    report_to: Literal["auto", "tensorboard", "none"] = field(default="auto", metadata={"help": REPORT_TO_HELP})
    gradient_checkpointing: bool = field(default=False, metadata={"help": GRADIENT_CHECKPOINTING_HELP})
    push_to_hub: bool = field(default=False, metadata={"help": PUSH_TO_HUB_HELP})
    hub_model_id: str | None = field(default=None, metadata={"help": HUB_MODEL_ID_HELP})
    overwrite_output_dir: bool = field(
        default=False, metadata={"help": "replace the outputs of an earlier run in output_dir"}
    )
    license: str = field(
        default=DEFAULT_LICENSE,
        metadata={
            "help": "the license on the model card (final_model/README.md), a Hub license id such as apache-2.0; "
            "'other' by default, as the weights' terms follow the starting model's and the data's"
        },
    )

    def training_steps(self) -> int:
        """The length of the schedule in optimizer steps."""
        if self.max_train_steps is not None:
            return self.max_train_steps
        if self.max_train_tokens is not None:
            return -(-self.max_train_tokens // self.tokens_per_batch)
        raise ValueError("Give the training length: --max_train_steps S or --max_train_tokens T (B x N tokens).")


# What a pre-training run writes. Arguments that do not change the trained weights may differ when a run resumes.
PRETRAINING_OUTPUTS = OutputLayout(
    finished=(FINAL_MODEL_DIR, RESULTS_FILE),
    other=(TOKENIZER_DIR,),
    resume_safe=frozenset(
        {
            "output_dir",
            "logging_steps",
            "eval_steps",
            "checkpointing_steps",
            "save_total_limit",
            "resume",
            "resume_from_checkpoint",
            "stop_after_step",
            "report_to",
            "gradient_checkpointing",
            "push_to_hub",
            "hub_model_id",
            "overwrite_output_dir",
            "per_device_eval_batch_size",
            "attn_implementation",
            "license",
            "eval_before_training",
        }
    ),
)


def check_pretraining_arguments(args: PretrainingArguments) -> None:
    """Refuses, before any work, option values that cannot run as asked or would train nothing (0 steps, learning rate
    0, or no token masked: the run would save its starting weights as pre-trained), and local inputs that do not exist.
    The model's options are checked by `model.check_model_options`."""
    if args.document_boundary == "heading":
        try:
            re.compile(args.document_heading_regex)
        except re.error as error:
            raise ValueError(
                f"--document_heading_regex {args.document_heading_regex!r} is not a regular expression ({error})."
            ) from None
    check_at_least(1, {"--max_train_steps": args.max_train_steps, "--max_train_tokens": args.max_train_tokens})
    args.training_steps()  # one of the two is given
    check_positive({"--learning_rate": args.learning_rate, "--max_grad_norm": args.max_grad_norm})
    if not 0.0 < args.mlm_probability <= 1.0:
        raise ValueError(f"--mlm_probability must be in (0, 1], got {args.mlm_probability}: it is the share masked.")
    check_in_range({"--warmup_ratio": args.warmup_ratio}, 0.0, 1.0)
    below_one = {
        "--adam_beta1": args.adam_beta1,
        "--adam_beta2": args.adam_beta2,
        "--hidden_dropout_prob": args.hidden_dropout_prob,
        "--attention_probs_dropout_prob": args.attention_probs_dropout_prob,
    }
    check_in_range(below_one, 0.0, 1.0, high_included=False)
    check_in_range({"--validation_split_percentage": args.validation_split_percentage}, 0.0, 100.0, False)
    non_negative = {
        "--weight_decay": args.weight_decay,
        "--adam_epsilon": args.adam_epsilon,
        "--num_warmup_steps": args.num_warmup_steps,
        "--eval_steps": args.eval_steps,  # 0: never during the run
        "--checkpointing_steps": args.checkpointing_steps,  # 0: no checkpoint
    }
    check_at_least(0, non_negative)
    counts = {
        "--max_seq_length": args.max_seq_length,
        "--tokens_per_batch": args.tokens_per_batch,
        "--per_device_train_batch_size": args.per_device_train_batch_size,
        "--per_device_eval_batch_size": args.per_device_eval_batch_size,
        "--train_tokenizer_vocab_size": args.train_tokenizer_vocab_size,
        "--logging_steps": args.logging_steps,
        "--stop_after_step": args.stop_after_step,
        "--max_eval_sequences": args.max_eval_sequences,
    }
    check_at_least(1, counts)
    if not (args.tokenizer_name or args.model_name_or_path or args.train_tokenizer_vocab_size):
        raise ValueError(
            "No tokenizer: pass --tokenizer_name FOLDER, --model_name_or_path FOLDER (with its tokenizer) or "
            "--train_tokenizer_vocab_size V to train one on the training files."
        )
    files = {"--train_files": args.train_files, "--validation_files": args.validation_files}
    models = {
        "--model_name_or_path": args.model_name_or_path,
        "--tokenizer_name": args.tokenizer_name,
        "--config_name": args.config_name,
    }
    check_input_paths(files, models)
    if args.push_to_hub:
        hub_repo_id(args.hub_model_id, args.output_dir)
