"""The options of a pre-training run (`examples/run_mlm.py` parses them with `transformers.HfArgumentParser`)."""

from dataclasses import dataclass, field
from typing import Literal

from ..model_card import DEFAULT_LICENSE
from ..training import OutputLayout


# " = Robert Boulter = " (stripped) starts a WikiText article; "= = Career = =" is a section, not a document.
WIKITEXT_HEADING = r"^= [^=].* =$"
FINAL_MODEL_DIR = "final_model"
TOKENIZER_DIR = "tokenizer"
RESULTS_FILE = "results.json"


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
        default="file", metadata={"help": "where a document ends (see blockbert_hf.pretraining.documents)"}
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
    max_seq_length: int = field(default=512, metadata={"help": "N, tokens per sequence"})
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
    attn_implementation: str = field(default="sdpa", metadata={"help": "attention kernel: eager | sdpa"})
    sparse_prediction: bool = field(
        default=True,
        metadata={
            "help": "run the MLM head on the masked positions only while training (same loss, about 30 percent "
            "faster at hidden 256 / vocab 8k); the saved model has it off"
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
    report_to: str = field(default="auto", metadata={"help": "auto (tensorboard if installed) | tensorboard | none"})
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
        if self.max_train_steps:
            return self.max_train_steps
        if self.max_train_tokens:
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
            "overwrite_output_dir",
            "per_device_eval_batch_size",
            "attn_implementation",
            "license",
        }
    ),
)
