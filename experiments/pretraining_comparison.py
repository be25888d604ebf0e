"""The pre-training comparison: full attention (two seeds) vs BlockBERT n=2 [3,1] and n=3 [2,1,1], one after the
other, at an equal token budget; writes a results table (markdown + JSON).

    python experiments/pretraining_comparison.py --output_dir outputs/pretraining-comparison \\
        --train_files path/to/pg1342.txt.gz path/to/pg2600.txt.gz path/to/pg1399.txt.gz path/to/pg2554.txt.gz \\
            path/to/wiki.valid.tokens.gz \\
        --validation_files path/to/wiki.test.raw.gz

Data (plain text, .gz or not): the training text of the committed comparison is four Project Gutenberg novels
(public domain: Pride and Prejudice #1342, War and Peace #2600, Anna Karenina #1399, Crime and Punishment #2554) and
the WikiText-2 validation split (tokenized, `wiki.valid.tokens`; CC BY-SA 3.0); the held-out text is the WikiText-2
test split (raw, `wiki.test.raw`; CC BY-SA 3.0). Documents end at files and WikiText article titles.

Setup (defaults): a 4-layer, hidden-256, 4-head model with N = 512 trained from scratch; one byte-level BPE tokenizer
(8,192 tokens) trained once on the training text and shared by all runs; 2,048 tokens per batch (4 sequences of 512),
3,072 steps = 6,291,456 tokens per run. The peak learning rate is 5e-4 instead of the paper's 2.5e-4 (which assumes
131,072-token batches and far longer runs); every other optimizer setting is the paper's. The budget goes to many small
batches: with 8,192-token batches, 192 steps and lr 1e-3, full attention stays on the unigram plateau (validation
perplexity about 2,300), which compares nothing.
Each run is `accelerate launch examples/run_mlm.py ...`; a run whose results.json exists is skipped and an
interrupted one resumes from its last checkpoint, so the command can simply be started again (with the same
options: other options for the same --output_dir are refused, unless --overwrite_output_dir starts over). A run's
time is its token budget over the training speed (tokens/s, in its results.json), which depends on the machine and
its CPU threads; tokens/s is only comparable between runs made on the same, otherwise idle machine.
"""

import json
import shlex
import subprocess
import sys
from pathlib import Path

from transformers import HfArgumentParser

from blockbert_experiments.pretraining_comparison import (
    COMPARISON_OUTPUTS,
    ComparisonArguments,
    comparison_notes,
    comparison_table,
    run_command,
)
from blockbert_hf.pretraining import (
    RESULTS_FILE,
    PretrainingArguments,
    list_checkpoints,
    prepare_tokenizer,
    read_documents,
)
from blockbert_hf.saving import write_file_atomically, write_json_atomically
from blockbert_hf.training import HelpFormatter, check_output_dir, claim_output_dir, run_arguments


REPO_ROOT = Path(__file__).resolve().parents[1]


def prepare_comparison_folder(args: ComparisonArguments) -> None:
    """Refuses a folder of a comparison with other options, then trains (or reuses) the shared tokenizer."""
    output_dir = Path(args.output_dir)
    run_args = run_arguments(args)
    inputs = {"--train_files": args.train_files, "--validation_files": args.validation_files}
    check_output_dir(output_dir, run_args, COMPARISON_OUTPUTS, overwrite=args.overwrite_output_dir, inputs=inputs)
    claim_output_dir(None, output_dir, run_args, COMPARISON_OUTPUTS, overwrite=args.overwrite_output_dir)
    tokenizer_args = PretrainingArguments(
        output_dir=str(output_dir),
        train_files=args.train_files,
        document_boundary="heading",
        train_tokenizer_vocab_size=args.vocab_size,
        max_seq_length=args.max_seq_length,
    )
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
        run_dir = Path(args.output_dir) / label
        if (run_dir / RESULTS_FILE).exists():
            print(f"{label}: done already ({run_dir / RESULTS_FILE})", flush=True)
            finished.append((label, json.loads((run_dir / RESULTS_FILE).read_text())))
            continue
        command = run_command(
            args, label, REPO_ROOT / "examples" / "run_mlm.py", resume=bool(list_checkpoints(run_dir))
        )
        print(f"{label}: {shlex.join(command)}", flush=True)
        if args.dry_run:
            continue
        subprocess.run(command, check=True)
        if not (run_dir / RESULTS_FILE).exists():  # e.g. --extra_args "--stop_after_step K": resumes next time
            print(f"{label}: stopped before the end of its schedule; start the command again to resume", flush=True)
            continue
        finished.append((label, json.loads((run_dir / RESULTS_FILE).read_text())))

    if args.dry_run or not finished:
        return
    table = comparison_table(finished)
    output_dir = Path(args.output_dir)
    write_file_atomically(
        output_dir / "comparison.md", f"# Pre-training comparison\n\n{table}\n\n{comparison_notes(args)}\n"
    )
    write_json_atomically(output_dir / "comparison.json", dict(finished))
    print(table)
    print(f"written: {output_dir / 'comparison.md'}, {output_dir / 'comparison.json'}")


if __name__ == "__main__":
    sys.exit(main())
