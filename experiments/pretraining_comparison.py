"""The pre-training comparison: full attention (two seeds) vs BlockBERT n=2 [3,1] and n=3 [2,1,1], one after the
other, at an equal token budget; writes a results table (markdown + JSON).

    python experiments/pretraining_comparison.py --output_dir outputs/pretraining-comparison \\
        --train_files path/to/pg1342.txt.gz path/to/pg2600.txt.gz path/to/pg1399.txt.gz path/to/pg2554.txt.gz \\
            path/to/wiki.valid.tokens.gz \\
        --validation_files path/to/wiki.test.raw.gz

The data and the setup (a 4-layer, hidden-256 model with N = 512 from scratch, 2,048 tokens per batch, 3,072 steps,
peak learning rate 5e-4): results/pretraining_comparison/README.md. Each run is `accelerate launch
examples/run_mlm.py ...`; a finished run is skipped and an interrupted one resumes, so the command can be started
again with the same options.
"""

import json
import shlex
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from transformers import HfArgumentParser

from blockbert_experiments import option
from blockbert_hf.saving import write_file_atomically, write_json_atomically
from blockbert_hf.train.pretraining import (
    RESULTS_FILE,
    PretrainingArguments,
    list_checkpoints,
    prepare_tokenizer,
    read_documents,
)
from blockbert_hf.train.runs import HelpFormatter, OutputLayout, check_output_dir, claim_output_dir, run_arguments


RUNS = {
    "full-seed0": ["--attention_pattern", "full", "--seed", "0"],
    "full-seed1": ["--attention_pattern", "full", "--seed", "1"],
    "blockwise-n2": [
        "--attention_pattern", "blockwise", "--num_blocks", "2", "--heads_per_shift", "3:1", "--seed", "0",
    ],
    "blockwise-n3": [
        "--attention_pattern", "blockwise", "--num_blocks", "3", "--heads_per_shift", "2:1:1", "--seed", "0",
    ],
}  # fmt: skip
REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_LAUNCHER = "accelerate launch --num_processes 1 --num_machines 1 --cpu --mixed_precision no --dynamo_backend no"


@dataclass
class ComparisonArguments:
    train_files: list[str] = field(
        metadata={
            "help": "training text, e.g. the committed comparison's: four Project Gutenberg novels (public domain) "
            "and WikiText-2 valid (CC BY-SA 3.0), path/to/pg1342.txt.gz ... path/to/wiki.valid.tokens.gz"
        }
    )
    validation_files: list[str] = field(
        metadata={"help": "held-out text, e.g. WikiText-2 test, raw (CC BY-SA 3.0): path/to/wiki.test.raw.gz"}
    )
    output_dir: str = option("outputs/pretraining-comparison", "tokenizer/, RUN/, table")
    vocab_size: int = option(8192, "of the byte-level BPE tokenizer all runs share")
    max_seq_length: int = 512
    max_train_tokens: int = option(6_291_456, "the equal budget, B x N tokens")
    tokens_per_batch: int = 2048
    learning_rate: float = 5e-4
    max_eval_sequences: int = 256
    eval_steps: int = 512
    runs: list[str] = option(list(RUNS), f"some of {', '.join(RUNS)}")
    launcher: str = option(DEFAULT_LAUNCHER, "command that starts examples/run_mlm.py")
    extra_args: str = option("", "more run_mlm.py options for every run (they win)")
    dry_run: bool = option(False, "print the commands only")
    overwrite_output_dir: bool = option(False, "start over: delete the earlier outputs")

    def __post_init__(self):
        unknown = sorted(set(self.runs) - set(RUNS))
        if unknown:
            raise ValueError(f"Unknown runs {unknown}: choose from {list(RUNS)}.")


# The comparison folder: its shared tokenizer, the runs' folders (each with run_mlm.py's own guard) and the table.
# Starting the command again continues the comparison, so a folder with the same arguments is never "finished".
COMPARISON_OUTPUTS = OutputLayout(
    finished=(),
    other=("tokenizer", *RUNS, "comparison.md", "comparison.json"),
    resume_safe=frozenset({"runs", "launcher", "dry_run", "overwrite_output_dir"}),
)


def run_command(args: ComparisonArguments, label: str, resume: bool) -> list[str]:
    """The command line that starts `examples/run_mlm.py` for one run of the comparison."""
    output_dir = Path(args.output_dir)
    return [
        *shlex.split(args.launcher), str(REPO_ROOT / "examples" / "run_mlm.py"),
        "--output_dir", str(output_dir / label), "--train_files", *args.train_files,
        "--validation_files", *args.validation_files,
        "--document_boundary", "heading", "--tokenizer_name", str(output_dir / "tokenizer"),
        "--max_seq_length", str(args.max_seq_length), "--num_hidden_layers", "4", "--hidden_size", "256",
        "--num_attention_heads", "4", "--intermediate_size", "1024",
        "--tokens_per_batch", str(args.tokens_per_batch), "--per_device_train_batch_size", "4",
        "--per_device_eval_batch_size", "16", "--max_train_tokens", str(args.max_train_tokens),
        "--learning_rate", str(args.learning_rate), "--logging_steps", "16", "--eval_steps", str(args.eval_steps),
        "--max_eval_sequences", str(args.max_eval_sequences), "--checkpointing_steps", "256", "--save_total_limit", "1",
        *RUNS[label], *(["--resume"] if resume else []), *shlex.split(args.extra_args),
    ]  # fmt: skip


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


def prepare_comparison_folder(args: ComparisonArguments) -> None:
    """Refuses a folder of a comparison with other options, then trains (or reuses) the shared tokenizer."""
    output_dir = Path(args.output_dir)
    run_args = run_arguments(args)
    inputs = {"--train_files": args.train_files, "--validation_files": args.validation_files}
    check_output_dir(output_dir, run_args, COMPARISON_OUTPUTS, overwrite=args.overwrite_output_dir, inputs=inputs)
    claim_output_dir(None, output_dir, run_args, COMPARISON_OUTPUTS, overwrite=args.overwrite_output_dir)
    tokenizer_args = PretrainingArguments(
        output_dir=str(output_dir), train_files=args.train_files, document_boundary="heading",
        train_tokenizer_vocab_size=args.vocab_size, max_seq_length=args.max_seq_length,
    )  # fmt: skip
    trained = (output_dir / "tokenizer").is_dir()  # by an earlier start with the same options
    documents = None if trained else read_documents(args.train_files, "heading")
    tokenizer = prepare_tokenizer(tokenizer_args, documents, trained_in=output_dir if trained else None)
    print(f"tokenizer: {len(tokenizer)} tokens in {output_dir / 'tokenizer'}", flush=True)


def build_parser() -> HfArgumentParser:
    return HfArgumentParser(ComparisonArguments, description=__doc__, formatter_class=HelpFormatter)


def main(argv=None):
    (args,) = build_parser().parse_args_into_dataclasses(args=argv)
    if not args.dry_run:
        prepare_comparison_folder(args)
    finished = []
    for label in args.runs:
        results = Path(args.output_dir) / label / RESULTS_FILE
        if results.exists():
            print(f"{label}: done already ({results})", flush=True)
        else:
            command = run_command(args, label, resume=bool(list_checkpoints(results.parent)))
            print(f"{label}: {shlex.join(command)}", flush=True)
            if args.dry_run:
                continue
            subprocess.run(command, check=True)
            if not results.exists():  # e.g. --extra_args "--stop_after_step K": resumes next time
                print(f"{label}: stopped before the end of its schedule; start the command again to resume", flush=True)
                continue
        finished.append((label, json.loads(results.read_text())))

    if args.dry_run or not finished:
        return
    table = comparison_table(finished)
    notes = (
        f"Equal budget: {args.max_train_tokens:,} tokens (B x N) per run, {args.tokens_per_batch:,} tokens per batch, "
        f"N = {args.max_seq_length}; validation: masked-token loss / perplexity on the first "
        f"{args.max_eval_sequences} packed sequences of {', '.join(Path(f).name for f in args.validation_files)} "
        "(same masks for every run). tokens/s counts real (non-padding) training tokens. The two full-attention "
        "seeds show the noise level. Paper (Qiu et al., 2020): n = 2 matches full attention, n = 3 is slightly worse."
    )
    output_dir = Path(args.output_dir)
    write_file_atomically(output_dir / "comparison.md", f"# Pre-training comparison\n\n{table}\n\n{notes}\n")
    write_json_atomically(output_dir / "comparison.json", dict(finished))
    print(table)
    print(f"written: {output_dir / 'comparison.md'}, {output_dir / 'comparison.json'}")


if __name__ == "__main__":
    sys.exit(main())
