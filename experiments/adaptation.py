"""The adaptation chain: a converted encoder without an MLM head (such as all-MiniLM-L6-v2) continues masked-LM
training with each attention pattern (docs/pretraining.md, "Adapt a converted checkpoint").

    python experiments/adaptation.py --output_dir outputs/adaptation \\
        --train_files outputs/adaptation_corpus/train/*.jsonl.gz \\
        --validation_files outputs/adaptation_corpus/held_out/wikitext2_test.jsonl.gz \\
        --reference_tokens 2000000 --adaptation_tokens 5000000 --mixed_precision bf16

Steps: `converted`, `reference` (the new head trained alone on the frozen encoder), then one run per pattern of
`PATTERNS` from the reference. Each step is a command of its own, recorded in OUTPUT_DIR/commands.jsonl; finished runs
are skipped and interrupted ones resume (`--stop_after_step K` slices a run; --dry_run prints what is left). Exit
status: 0 done, 1 a step failed, 2 bad options.
"""

import json
import math
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from transformers import HfArgumentParser

from blockbert_benchmarks.measuring.machine import machine_description, recorded_command
from blockbert_experiments import option, run_example_in_process
from blockbert_experiments.minilm import installed_minilm
from blockbert_hf.saving import write_file_atomically, write_json_atomically
from blockbert_hf.train.pretraining import FINAL_MODEL_DIR, RESULTS_FILE, list_checkpoints
from blockbert_hf.train.runs import (
    METRICS_FILE,
    RUN_ARGS_FILE,
    HelpFormatter,
    OutputDirError,
    OutputLayout,
    check_output_dir,
    claim_output_dir,
    differing_arguments,
    read_metrics,
    run_arguments,
)


REPO_ROOT = Path(__file__).resolve().parents[1]
CONVERTED = "converted"
REFERENCE = "reference"
RUNS_DIR = "runs"
COMMANDS_FILE = "commands.jsonl"
RESULTS_JSON = "adaptation_results.json"
CURVES_PNG = "adaptation_curves.png"
DEFAULT_LAUNCHER = "accelerate launch --num_processes 1 --num_machines 1 --dynamo_backend no"
SOURCE_LENGTH = 512  # N of the source (all-MiniLM-L6-v2's, RoBERTa's): the runs' names say their N


@dataclass(frozen=True)
class Pattern:
    """A continued-MLM run: its N, its `run_mlm.py` attention options and what it is."""

    max_seq_length: int
    options: tuple[str, ...]
    description: str


def _blockwise(blocks: int, heads: str, *extra: str) -> tuple[str, ...]:
    return ("--attention_pattern", "blockwise", "--num_blocks", str(blocks), "--heads_per_shift", heads, *extra)


def _long_n2(heads: str) -> Pattern:
    """N = 1024 as two blocks of the source's 512 positions, each block restarting them."""
    description = f"N = 1024, n = 2 blocks of 512 ({heads}), positions restarting in each block"
    return Pattern(1024, _blockwise(2, heads, "--block_relative_positions"), description)


# In the order they run: the control and n = 2 at N first (the pair a QA comparison needs most), then the long model.
PATTERNS = {
    "full_n512": Pattern(512, ("--attention_pattern", "full"), "full attention at N = 512 (the control)"),
    "n512_n2_10-2": Pattern(512, _blockwise(2, "10:2"), "N = 512, n = 2 (10:2)"),
    "n1024_n2_10-2": _long_n2("10:2"),
    "n512_n3_8-2-2": Pattern(512, _blockwise(3, "8:2:2"), "N = 512, n = 3 (8:2:2)"),
    "n1024_n2_9-3": _long_n2("9:3"),
}
RUN_NAMES = (REFERENCE, *PATTERNS)


@dataclass
class AdaptationArguments:
    train_files: list[str] = field(metadata={"help": "training text, e.g. the adaptation corpus's train/*.jsonl.gz"})
    validation_files: list[str] = field(metadata={"help": "held-out text, e.g. held_out/wikitext2_test.jsonl.gz"})
    output_dir: str = option("outputs/adaptation", "converted/, runs/RUN/, results")
    source_model: str | None = option(None, "BERT/RoBERTa folder to convert (default: the installed all-MiniLM-L6-v2)")
    document_boundary: str = option("file", "as run_mlm.py's (the corpus's: file)")
    runs: list[str] = option(list(RUN_NAMES), f"some of {RUN_NAMES}")
    reference_tokens: int = option(2_000_000, "the head-only run's budget, B x N tokens")
    adaptation_tokens: int = option(5_000_000, "each pattern run's budget, B x N tokens")
    tokens_per_batch: int = option(32768, "B x N per optimizer step, for every run")
    tokens_per_micro_batch: int = option(
        8192, "sequences per forward pass x N (per_device_train_batch_size = this / N)"
    )
    reference_learning_rate: float = option(1e-3, "peak rate of the head-only run")
    learning_rate: float = option(1e-4, "peak rate of the pattern runs")
    dropout: float = option(0.1, "hidden and attention dropout of the pattern runs")
    train_word_embeddings: bool = option(False, "let the pattern runs train the word embeddings (and the tied decoder)")
    evaluations: int = option(10, "held-out evaluations per run (and one before it)")
    checkpointing_steps: int | None = option(None, "default: at every evaluation")
    max_eval_sequences: int | None = option(None, "default: the whole held-out text")
    mixed_precision: str = option("no", "no | fp16 | bf16 (bf16 on a recent GPU)")
    seed: int = 0
    stop_after_step: int | None = option(
        None, "with one run in --runs: stop it after this step (a checkpoint) to resume later"
    )
    launcher: str = option(DEFAULT_LAUNCHER, "command that starts examples/run_mlm.py")
    threads: int | None = option(None, "OMP_NUM_THREADS of each run (CPU)")
    in_process: bool = option(False, "call the scripts' main() here (tests)")
    dry_run: bool = option(False, "print the commands of the steps left, run nothing")

    def __post_init__(self):
        unknown = sorted(set(self.runs) - set(RUN_NAMES))
        if unknown:
            raise ValueError(f"Unknown runs {unknown}: choose among {', '.join(RUN_NAMES)}.")
        self.runs = [name for name in RUN_NAMES if name in self.runs]  # the chain's order
        if self.stop_after_step is not None and len(self.runs) != 1:
            raise ValueError(
                f"--stop_after_step stops one run; --runs names {len(self.runs)}: pass --runs NAME with it."
            )
        for length in (SOURCE_LENGTH, 2 * SOURCE_LENGTH):
            for name in ("tokens_per_batch", "tokens_per_micro_batch"):
                if getattr(self, name) % length:
                    raise ValueError(
                        f"--{name} {getattr(self, name)} is not a multiple of N = {length} (the runs use N = "
                        f"{SOURCE_LENGTH} and {2 * SOURCE_LENGTH}): use a multiple of {2 * SOURCE_LENGTH}."
                    )


# The chain's folder: the converted model, the runs (each with run_mlm.py's own guard), the commands and the results.
ADAPTATION_OUTPUTS = OutputLayout(
    finished=(),
    other=(CONVERTED, RUNS_DIR, COMMANDS_FILE, RESULTS_JSON, CURVES_PNG),
    resume_safe=frozenset({"runs", "stop_after_step", "launcher", "threads", "in_process", "dry_run"}),
)


def run_dir(args: AdaptationArguments, name: str) -> Path:
    return Path(args.output_dir) / RUNS_DIR / name


def schedule(args: AdaptationArguments, name: str) -> dict[str, int]:
    """A run's steps, and its evaluation, logging and checkpoint intervals."""
    steps = -(-(args.reference_tokens if name == REFERENCE else args.adaptation_tokens) // args.tokens_per_batch)
    eval_steps = max(1, math.ceil(steps / args.evaluations))
    every = {"logging_steps": max(1, eval_steps // 5), "checkpointing_steps": args.checkpointing_steps or eval_steps}
    return {"steps": steps, "eval_steps": eval_steps, **every}


def convert_args(args: AdaptationArguments, source: str | Path) -> list[str]:
    """`examples/convert_roberta_to_blockbert.py`: full attention at the source's N, with an MLM head to train (a
    sentence encoder's pooler has no place in it)."""
    return [
        str(source), str(Path(args.output_dir) / CONVERTED),
        "--target_class", "BlockBertForMaskedLM", "--drop_source_keys", "pooler.", "bert.pooler.",
        "--attention_pattern", "full", "--num_blocks", "1", "--max_seq_length", str(SOURCE_LENGTH),
    ]  # fmt: skip


def run_mlm_args(args: AdaptationArguments, name: str) -> list[str]:
    """The `examples/run_mlm.py` arguments of a run (without `--resume`)."""
    length = SOURCE_LENGTH if name == REFERENCE else PATTERNS[name].max_seq_length
    plan = schedule(args, name)
    common = [
        "--output_dir", str(run_dir(args, name)), "--train_files", *args.train_files,
        "--validation_files", *args.validation_files, "--document_boundary", args.document_boundary,
        "--max_seq_length", str(length), "--tokens_per_batch", str(args.tokens_per_batch),
        "--per_device_train_batch_size", str(args.tokens_per_micro_batch // length),
        "--per_device_eval_batch_size", str(args.tokens_per_micro_batch // length),
        "--max_train_steps", str(plan["steps"]), "--eval_steps", str(plan["eval_steps"]),
        "--logging_steps", str(plan["logging_steps"]), "--checkpointing_steps", str(plan["checkpointing_steps"]),
        "--save_total_limit", "1", "--eval_before_training", "--mixed_precision", args.mixed_precision,
        "--seed", str(args.seed), "--report_to", "none",
    ]  # fmt: skip
    if args.max_eval_sequences is not None:
        common += ["--max_eval_sequences", str(args.max_eval_sequences)]
    if name == REFERENCE:
        return [
            "--model_name_or_path", str(Path(args.output_dir) / CONVERTED), "--train_only_mlm_head",
            "--learning_rate", str(args.reference_learning_rate),
            "--hidden_dropout_prob", "0", "--attention_probs_dropout_prob", "0", *common,
        ]  # fmt: skip
    pattern = [
        "--model_name_or_path", str(run_dir(args, REFERENCE) / FINAL_MODEL_DIR), *PATTERNS[name].options,
        "--learning_rate", str(args.learning_rate),
        "--hidden_dropout_prob", str(args.dropout), "--attention_probs_dropout_prob", str(args.dropout),
    ]  # fmt: skip
    if not args.train_word_embeddings:
        pattern.append("--freeze_word_embeddings")
    return pattern + common


def launch_words(args: AdaptationArguments, script: str, script_args: Sequence[str]) -> list[str]:
    """The command line of a step as it is recorded: the converter with python, run_mlm.py with the launcher."""
    prefix = shlex.split(args.launcher) if script == "run_mlm.py" else ["python"]
    return [*prefix, str(REPO_ROOT / "examples" / script), *script_args]


def _executable(words: list[str]) -> list[str]:
    """`words` with this interpreter for `python` and `accelerate launch`, which need not be on PATH."""
    if words[0] == "python":
        return [sys.executable, *words[1:]]
    if words[:2] == ["accelerate", "launch"]:
        return [sys.executable, "-m", "accelerate.commands.launch", *words[2:]]
    return words


def run_step(args: AdaptationArguments, label: str, script: str, script_args: list[str], names: Mapping) -> int:
    """Runs a step (a fresh process, or `main` here with `in_process`), appends its record to `commands.jsonl` and
    returns its exit status."""
    words = launch_words(args, script, script_args)
    print(f"{label}: {shlex.join(words)}", flush=True)
    started = time.perf_counter()
    if args.in_process:
        returncode = run_example_in_process(script, script_args)
    else:
        environment = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        if args.threads:
            environment.update(OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
        returncode = subprocess.run(_executable(words), env=environment).returncode
    seconds = round(time.perf_counter() - started, 1)
    record = {"run": label, "command": recorded_command(words, names), "returncode": returncode, "seconds": seconds}
    with open(Path(args.output_dir) / COMMANDS_FILE, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")
    return returncode


def run_chain(args: AdaptationArguments, source: str | Path) -> dict[str, str]:
    """Runs the steps left, in order; returns each selected run's state (`finished`, `stopped`, `waiting` for the
    reference, `planned` in a dry run, `failed`). A failed step stops the chain."""
    # The folders a recorded command names by variable, never by a path of the machine that ran it.
    names = {"$OUTPUT_DIR": Path(args.output_dir), "$SOURCE_MODEL": Path(source)}
    states, converted = {}, Path(args.output_dir) / CONVERTED
    if not ((converted / "config.json").is_file() and (converted / "model.safetensors").is_file()):
        script = "convert_roberta_to_blockbert.py"
        if args.dry_run:
            print(f"{CONVERTED}: {shlex.join(launch_words(args, script, convert_args(args, source)))}", flush=True)
        elif run_step(args, CONVERTED, script, convert_args(args, source), names):
            print(f"{CONVERTED}: the conversion failed; the chain stops here", flush=True)
            return {CONVERTED: "failed"}
    for name in args.runs:
        folder = run_dir(args, name)
        if (folder / RESULTS_FILE).is_file():
            print(f"{name}: done already ({folder / RESULTS_FILE})", flush=True)
            states[name] = "finished"
            continue
        if name != REFERENCE and not args.dry_run and not (run_dir(args, REFERENCE) / RESULTS_FILE).is_file():
            print(f"{name}: waits for the reference run to finish", flush=True)
            states[name] = "waiting"
            continue
        script_args = run_mlm_args(args, name)
        if list_checkpoints(folder):
            script_args.append("--resume")
        if args.stop_after_step is not None:
            script_args += ["--stop_after_step", str(args.stop_after_step)]
        if args.dry_run:
            print(f"{name}: {shlex.join(launch_words(args, 'run_mlm.py', script_args))}", flush=True)
            states[name] = "planned"
            continue
        if run_step(args, name, "run_mlm.py", script_args, names):
            states[name] = "failed"
            print(f"{name}: failed; the chain stops here (start it again to resume)", flush=True)
            break
        states[name] = "finished" if (folder / RESULTS_FILE).is_file() else "stopped"
    return states


def check_chain_folder(args: AdaptationArguments) -> None:
    """Refuses a folder where a chain with other arguments (budgets, rates, data...) converted or trained: its runs
    would otherwise be refused one by one, each by run_mlm.py's own guard. The runs to do and the slicing may change."""
    output_dir = Path(args.output_dir)
    saved = output_dir / RUN_ARGS_FILE
    if not saved.is_file() or not any((output_dir / name).exists() for name in (CONVERTED, RUNS_DIR)):
        return
    differing = differing_arguments(json.loads(saved.read_text()), run_arguments(args), ADAPTATION_OUTPUTS.resume_safe)
    if differing:
        described = ", ".join(f"--{name} {then!r} there, {now!r} now" for name, (then, now) in differing.items())
        raise OutputDirError(
            f"{output_dir} holds a chain with other arguments ({described}): start it again with those, or choose "
            "another --output_dir."
        )


def collect_results(args: AdaptationArguments) -> dict:
    """Every run's curves, final held-out loss and recorded commands, the chain's settings and the machine (the one
    that collects: the chain runs its steps there)."""
    commands: dict[str, list[str]] = {}
    commands_file = Path(args.output_dir) / COMMANDS_FILE
    if commands_file.is_file():
        for line in commands_file.read_text().splitlines():
            record = json.loads(line)
            commands.setdefault(record["run"], []).append(record["command"])
    runs = {}
    for name in RUN_NAMES:
        folder = run_dir(args, name)
        if not folder.is_dir():
            continue
        results = json.loads((folder / RESULTS_FILE).read_text()) if (folder / RESULTS_FILE).is_file() else {}
        records = read_metrics(folder / METRICS_FILE) if (folder / METRICS_FILE).is_file() else []
        curves = {  # the training and held-out losses of its metrics.jsonl against tokens seen (B x N)
            curve: [[record["step"] * args.tokens_per_batch, record[loss]] for record in records if loss in record]
            for curve, loss in (("train_loss_curve", "loss"), ("held_out_loss_curve", "eval_loss"))
        }
        runs[name] = {
            "description": "MLM head alone on the frozen encoder" if name == REFERENCE else PATTERNS[name].description,
            "max_seq_length": SOURCE_LENGTH if name == REFERENCE else PATTERNS[name].max_seq_length,
            "finished": bool(results.get("finished")),
            "held_out_loss_before": curves["held_out_loss_curve"][0][1] if curves["held_out_loss_curve"] else None,
            "held_out_loss": results.get("eval_loss"),
            "held_out_perplexity": results.get("eval_perplexity"),
            **{key: results.get(key) for key in ("trained_parameters", "train_tokens", "train_seconds")},
            "tokens_per_second": results.get("tokens_per_second"),
            **curves,
            "commands": commands.get(name, []),
        }
    settings = {key: value for key, value in vars(args).items() if key not in ADAPTATION_OUTPUTS.resume_safe}
    settings.update(output_dir="$OUTPUT_DIR", source_model="$SOURCE_MODEL")
    for name in ("train_files", "validation_files"):
        settings[name] = [Path(path).name for path in settings[name]]
    return {
        "machine": machine_description(),
        "settings": settings,
        "conversion": commands.get(CONVERTED, []),
        "runs": runs,
    }


def plot_curves(results: Mapping, path: str | Path) -> None:
    """Training loss (left) and held-out loss (right) of every run against the tokens it has seen."""
    from matplotlib.figure import Figure  # no pyplot: nothing to show, no backend to choose

    figure = Figure(figsize=(11, 4.2), layout="constrained")
    train_axes, held_out_axes = figure.subplots(1, 2)
    for name, run in results["runs"].items():
        for axes, key, marker in ((train_axes, "train_loss_curve", None), (held_out_axes, "held_out_loss_curve", "o")):
            points = run[key]
            if points:
                axes.plot([x / 1e6 for x, _ in points], [y for _, y in points], marker=marker, ms=3, label=name)
    train_axes.set(title="MLM training loss", xlabel="tokens seen (millions, B x N)", ylabel="loss")
    held_out_axes.set(title="held-out MLM loss (step 0: before the run)", xlabel="tokens seen (millions, B x N)")
    held_out_axes.legend(fontsize=8)
    write_file_atomically(path, lambda target: figure.savefig(target, dpi=120, format="png"))


def build_parser() -> HfArgumentParser:
    return HfArgumentParser(AdaptationArguments, description=__doc__, formatter_class=HelpFormatter)


def prepare(args: AdaptationArguments) -> Path:
    """Checks the options, the inputs and the output folder before any work; returns the source model's folder."""
    if args.stop_after_step is not None:  # the sliced run resumes from the checkpoint of that step: it must be one
        every = schedule(args, args.runs[0])["checkpointing_steps"]
        lower = args.stop_after_step // every * every
        if lower != args.stop_after_step:
            raise ValueError(
                f"--stop_after_step {args.stop_after_step} is not a checkpoint step of {args.runs[0]} (every {every} "
                f"steps), so its work since step {lower} would be lost: use {lower or every} or {lower + every}, or "
                "set --checkpointing_steps."
            )
    missing = [path for path in [*args.train_files, *args.validation_files] if not Path(path).is_file()]
    if missing:
        raise FileNotFoundError(f"Data file(s) {', '.join(missing)} do not exist.")
    source = Path(args.source_model) if args.source_model else installed_minilm()
    if not args.dry_run:
        check_chain_folder(args)
        run_args = run_arguments(args)
        check_output_dir(args.output_dir, run_args, ADAPTATION_OUTPUTS, inputs={"--source_model": str(source)})
        claim_output_dir(None, args.output_dir, run_args, ADAPTATION_OUTPUTS)
    return source


def main(argv=None) -> int:
    try:
        (args,) = build_parser().parse_args_into_dataclasses(args=argv)
        source = prepare(args)
    except (ValueError, FileNotFoundError, OutputDirError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    states = run_chain(args, source)
    if not args.dry_run and (Path(args.output_dir) / RUNS_DIR).is_dir():
        results = collect_results(args)
        write_json_atomically(Path(args.output_dir) / RESULTS_JSON, results)
        plot_curves(results, Path(args.output_dir) / CURVES_PNG)
        summary = {name: run["held_out_loss"] for name, run in results["runs"].items()}
        print(json.dumps({"states": states, "held_out_loss": summary}))
        print(f"written: {Path(args.output_dir) / RESULTS_JSON}")
    return 1 if "failed" in states.values() else 0


if __name__ == "__main__":
    sys.exit(main())
