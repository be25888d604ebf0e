"""`qa_comparison.py {run,report}`: the long-context QA fine-tuning comparison and its recipe choice (grids in
`grid`), run cell by cell and resumable, and the reports written from the committed results. What each grid measures
and how to rerun it: results/qa_comparison/README.md, results/qa_recipe/README.md, results/distillation/README.md.

    python experiments/qa_comparison.py run --dry_run     # the plan: what each cell still needs, time estimates
    python experiments/qa_comparison.py run --recipe_dir results/qa_recipe --squad_file path/to/dev-v1.1.json.gz
    python experiments/qa_comparison.py report            # table, plot, intervals from the cells finished so far

`run` can be interrupted and started again: converted models are cached, finished trainings and evaluations are
skipped, an interrupted training resumes from its last checkpoint. Large files go to --work_dir, results and the
report to --results_dir. Needs the sets of experiments/build_long_context_qa.py in --data_dir.
"""

import argparse
import logging
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
from transformers import HfArgumentParser

from blockbert_benchmarks.measuring.machine import machine_description, recorded_command, recorded_path
from blockbert_hf.saving import check_output_keeps_inputs, sha256_of_file, write_json_atomically
from blockbert_hf.train.runs import HelpFormatter, list_checkpoints, read_metrics

from .distillation_report import write_stage_a_report
from .grid import (
    PARAGRAPHS,
    RECIPE_GRIDS,
    Cell,
    ComparisonConfig,
    batch_sizes,
    cell_recipe,
    eval_batch_size,
    grid_cells,
    select_cells,
)
from .layout import (
    MEASUREMENTS_FILE,
    STARTING_MODEL_FILE,
    CellLayout,
    cell_sets,
    check_distilled_models,
    check_squad_source,
    copy_command,
    is_saved_model,
    planned_record,
    prepare_distilled_model,
    read_json,
    read_manifest,
    recorded_names,
    resolve_source_model,
    test_set_names,
    training_file,
)
from .plan import estimated_train_minutes, format_plan, plan_comparison
from .recipe_report import apply_recipe_choice, write_recipe_report
from .report import write_report
from .scores import ids_digest, question_scores, set_questions
from .stage_b_report import write_stage_b_report
from .steps import StepFailed, check_step, command_line, convert_args, eval_args, run_step, train_args


logger = logging.getLogger(__name__)

SCRIPT = Path(__file__).resolve().parents[2] / "qa_comparison.py"


def _train(config: ComparisonConfig, cell: Cell, manifest: Mapping, names: Mapping[str, Path]) -> None:
    """Fine-tunes the cell, resuming from its last checkpoint; every attempt goes to the train log, logged before it
    starts so that a killed one shows as one without a return code."""
    layout = CellLayout(config, cell)
    training_file(config, cell, manifest, create=True)
    args = train_args(config, cell, manifest, estimated_train_minutes(config, cell, manifest))
    checkpoints = list_checkpoints(layout.train)
    if checkpoints:
        args.append("--resume")
    attempts = read_json(layout.train_log) or []
    attempt = {
        "command": command_line("run_qa.py", args, names),
        "resumed_from": checkpoints[-1].name if checkpoints else None,
        "machine": machine_description(),
        "returncode": None,
    }
    write_json_atomically(layout.train_log, [*attempts, attempt])
    result = run_step(config, "run_qa.py", args, check=False)
    attempt.update(returncode=result.returncode, seconds=result.seconds, peak_rss_mb=result.peak_rss_mb)
    write_json_atomically(layout.train_log, [*attempts, attempt])
    check_step(result, "run_qa.py", args)


def _evaluate(
    config: ComparisonConfig, cell: Cell, manifest: Mapping, test_set: str, names: Mapping[str, Path]
) -> None:
    """Evaluates the cell on one set, then writes its measurements file, which marks the evaluation as finished."""
    folder = CellLayout(config, cell).eval(test_set)
    args = eval_args(config, cell, manifest, test_set)
    if folder.exists():  # what an interrupted evaluation left: start that set over
        args.append("--overwrite_output_dir")
    result = run_step(config, "run_qa.py", args)
    command = command_line("run_qa.py", args, names)
    measurements = {"command": command, "wall_seconds": result.seconds, "peak_rss_mb": result.peak_rss_mb}
    write_json_atomically(folder / MEASUREMENTS_FILE, measurements)


def _convert(config: ComparisonConfig, cell: Cell, source: Path) -> None:
    """Converts the cell's starting model (or copies its distilled one) unless it is cached (cells that differ only in
    seed or data share it)."""
    model = CellLayout(config, cell).model
    if is_saved_model(model):
        return
    if cell.distilled_from:
        logger.info(copy_command(prepare_distilled_model(config, cell, model), str(model)))
    else:
        run_step(config, "convert_roberta_to_blockbert.py", convert_args(config, cell, source))


def _write_students_logits(
    config: ComparisonConfig, teacher: Cell, students: Sequence[Cell], manifest: Mapping, source: Path
) -> None:
    """The fine-tuned `teacher`'s logits over the training windows of each cell it teaches, where not cached yet: the
    few MB of logits outlive its weights. Each file gets a record of its command beside it."""
    for student in students:
        logits = CellLayout(config, student).teacher_logits
        if student.teacher != teacher.name or logits.is_file():
            continue
        _convert(config, student, source)  # the student's tokenizer and config make its windows
        training_file(config, student, manifest, create=True)
        minutes = estimated_train_minutes(config, student, manifest)
        args = [*train_args(config, student, manifest, minutes), "--teacher_logits_only"]
        result = run_step(config, "run_qa.py", args)
        record = {
            "command": command_line("run_qa.py", args, recorded_names(config, source)),
            "machine": machine_description(),
            "seconds": result.seconds,
            "sha256": sha256_of_file(logits),
        }
        write_json_atomically(logits.with_suffix(".json"), record)


def run_cell(
    config: ComparisonConfig,
    cell: Cell,
    manifest: Mapping,
    test_sets: Sequence[str],
    source: Path,
    students: Sequence[Cell] = (),
) -> None:
    """Runs what the cell still needs (with its logits for the `students` it teaches), then writes its results files."""
    layout = CellLayout(config, cell)
    test_sets = cell_sets(manifest, test_sets, cell)
    names = recorded_names(config, source)
    _convert(config, cell, source)
    if not is_saved_model(layout.trained_model):
        _train(config, cell, manifest, names)
    _write_students_logits(config, cell, students, manifest, source)
    for test_set in test_sets:
        if cell.convergence_check and manifest["sets"][test_set]["half"] != "dev":  # the dev sets come first
            _check_convergence(config, cell, manifest, names)
        if not (layout.eval(test_set) / MEASUREMENTS_FILE).is_file():
            _evaluate(config, cell, manifest, test_set, names)
            write_cell_results(config, cell, manifest, test_sets, source)
    write_cell_results(config, cell, manifest, test_sets, source)


class ConvergenceCheckFailed(StepFailed):
    """A cell's F1 on a dev set of its convergence check is below the check's: it is not scored on any other set."""


def convergence_record(config: ComparisonConfig, cell: Cell) -> dict:
    """The cell's convergence check as its results record it: per dev set the F1 it asks and the F1 reached (None
    until that set is evaluated), and whether all passed (None until all are evaluated)."""
    checks = []
    for dev_set, minimum in cell.convergence_check:
        metrics = read_json(CellLayout(config, cell).eval(dev_set) / "eval_metrics.json")
        f1 = None if metrics is None else round(metrics["f1"], 2)
        checks.append({"set": dev_set, "min_f1": minimum, "f1": f1, "passed": None if f1 is None else f1 >= minimum})
    passed = [check["passed"] for check in checks]
    return {"sets": checks, "passed": None if None in passed else all(passed)}


def _check_convergence(config: ComparisonConfig, cell: Cell, manifest: Mapping, names: Mapping[str, Path]) -> None:
    """Evaluates the dev sets of the cell's convergence check; `ConvergenceCheckFailed` where an F1 is below it."""
    for dev_set, _ in cell.convergence_check:
        if not (CellLayout(config, cell).eval(dev_set) / MEASUREMENTS_FILE).is_file():
            _evaluate(config, cell, manifest, dev_set, names)
    failed = [check for check in convergence_record(config, cell)["sets"] if not check["passed"]]
    if failed:
        below = "; ".join(f"F1 {check['f1']:.1f} on {check['set']}, below its {check['min_f1']:g}" for check in failed)
        raise ConvergenceCheckFailed(
            f"{below}: the cell is not scored on any test set, and its training budget needs revisiting "
            "(docs/long_document_decision_rule.md)."
        )


def run_comparison(config: ComparisonConfig, grid: Sequence[Cell] | None = None) -> list[str]:
    """Runs the selected cells of `grid` (default: `config.grid`'s) in priority order, writing results and the report
    as it goes; a failing cell is logged and skipped. Returns the names of the cells that failed."""
    grid = grid_cells(config) if grid is None else grid
    cells = select_cells(config.cells, grid)  # an unknown cell name is the first thing to report
    manifest = read_manifest(config)
    test_sets = test_set_names(config, manifest)
    source = resolve_source_model(config)
    check_distilled_models(config, [cell for cell in cells if not is_saved_model(CellLayout(config, cell).model)])
    untrained = [cell for cell in cells if not is_saved_model(CellLayout(config, cell).trained_model)]
    _check_teachers(config, untrained)
    # A missing --squad_file stops the run before any work, not after the cells before it.
    if any(
        cell.training_set == PARAGRAPHS and not training_file(config, cell, manifest).is_file() for cell in untrained
    ):
        check_squad_source(config, manifest)
    if config.jobs > 1:
        return _run_in_parallel(config, grid, cells, manifest, test_sets, source)
    failed = []
    for cell in cells:
        logger.info(f"Cell {cell.name}: {cell.label}")
        try:
            run_cell(config, cell, manifest, test_sets, source, students=grid)
        except StepFailed as error:
            logger.error(f"Cell {cell.name} failed ({error}); going on with the next cell.")
            failed.append(cell.name)
        if config.report_after_each_cell:
            write_grid_report(config, grid)
    return failed


def _check_teachers(config: ComparisonConfig, cells: Sequence[Cell]) -> None:
    """Refuses, before any work, task-distilled cells with neither their teacher's cached logits nor its fine-tuned
    model, unless the teacher runs before them in this call (not with `--jobs`)."""
    for position, cell in enumerate(cells):
        layout = CellLayout(config, cell)
        runs_before = config.jobs == 1 and cell.teacher in [other.name for other in cells[:position]]
        if not cell.teacher or runs_before or layout.teacher_logits.is_file() or is_saved_model(layout.teacher_model):
            continue
        raise FileNotFoundError(
            f"Cell {cell.name} is task-distilled from {cell.teacher}, which has neither cached logits "
            f"({layout.teacher_logits}) nor a fine-tuned model ({layout.teacher_model}): run --cells {cell.teacher} "
            "first."
        )


def _run_in_parallel(
    config: ComparisonConfig, grid: Sequence[Cell], cells: Sequence[Cell], manifest: Mapping, test_sets, source: Path
) -> list[str]:
    """`--jobs K`: converts the models one at a time, runs up to K cells at once, each as `qa_comparison.py run --cells
    <cell>` logging to `<work_dir>/logs/`, then writes the results files and the report, so that no two processes
    write one file. Returns the names of the cells that failed."""
    if config.in_process:
        raise ValueError("--jobs runs each cell as its own process: it cannot be combined with --in_process.")
    failed, ready = [], []
    for cell in cells:
        try:
            _convert(config, cell, source)
            ready.append(cell)
        except StepFailed as error:
            logger.error(f"Cell {cell.name} failed ({error}); going on with the next cell.")
            failed.append(cell.name)
    commands = {cell.name: cell_command(config, cell.name) for cell in ready}
    failed += run_in_parallel(commands, config.jobs, Path(config.work_dir) / "logs")
    for cell in ready:  # one writer: the processes' shared questions.json as one run leaves it
        if is_saved_model(CellLayout(config, cell).trained_model):
            write_cell_results(config, cell, manifest, test_sets, source)
    write_grid_report(config, grid)
    return [cell.name for cell in cells if cell.name in failed]


def cell_command(config: ComparisonConfig, cell_name: str) -> list[str]:
    """The command of one cell's process: this run's options for that cell alone, without the report (the options
    that differ from the defaults)."""
    child = replace(config, cells=[cell_name], jobs=1, report_after_each_cell=False)
    defaults, args = ComparisonConfig(), []
    for name, value in vars(child).items():
        if value != getattr(defaults, name):
            args += [f"--{name}", *(str(item) for item in (value if isinstance(value, list) else [value]))]
    return [sys.executable, str(SCRIPT), "run", *args]


def _launch(command: Sequence[str], log_file: Path) -> subprocess.Popen:
    with open(log_file, "w") as log:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(list(command), stdout=log, stderr=subprocess.STDOUT)


def run_in_parallel(
    commands: Mapping[str, Sequence[str]],
    jobs: int,
    log_dir: Path,
    launch: Callable[[Sequence[str], Path], subprocess.Popen] = _launch,
    poll_seconds: float = 2.0,
) -> list[str]:
    """Runs `commands` (name -> command), at most `jobs` at once, in their order; returns the names of those that
    exited with a non-zero status."""
    if jobs < 1:
        raise ValueError(f"--jobs {jobs}: give at least 1.")
    log_dir.mkdir(parents=True, exist_ok=True)
    pending, running, failed = list(commands), {}, []
    while pending or running:
        while pending and len(running) < jobs:
            name = pending.pop(0)
            log_file = log_dir / f"{name}.log"
            running[name] = launch(commands[name], log_file)
            logger.info(f"Cell {name} started (its log: {log_file}).")
        for name, process in list(running.items()):
            if process.poll() is None:
                continue
            del running[name]
            if process.returncode:
                failed.append(name)
                logger.error(f"Cell {name} failed (exit status {process.returncode}; see its log).")
            else:
                logger.info(f"Cell {name} finished.")
        if running:
            time.sleep(poll_seconds)
    return failed


def write_grid_report(config: ComparisonConfig, grid: Sequence[Cell] | None = None) -> dict:
    """The report of `config.grid`."""
    if config.grid in RECIPE_GRIDS:
        return write_recipe_report(config)
    if config.grid == "distilled_table4":
        return write_stage_a_report(config)
    if config.grid == "distilled_long":
        return write_stage_b_report(config)
    return write_report(config, grid_cells(config) if grid is None else grid)


def _update_questions_file(config: ComparisonConfig, questions: Mapping[str, dict]) -> None:
    """`questions.json`: per set, the question ids and their articles that every cell's `scores.json` follows."""
    path = Path(config.results_dir) / "questions.json"
    stored = read_json(path) or {}
    wanted = {name: {key: entry[key] for key in ("titles", "article", "ids")} for name, entry in questions.items()}
    if any(stored.get(name) != entry for name, entry in wanted.items()):
        write_json_atomically(path, {**stored, **wanted}, indent=None)


def _set_results(config: ComparisonConfig, cell: Cell, manifest: Mapping, test_set: str, questions: dict):
    """A finished evaluation's summary (for `results.json`) and per-question scores (for `scores.json`)."""
    folder = CellLayout(config, cell).eval(test_set)
    metrics = read_json(folder / "eval_metrics.json")
    measurements = read_json(folder / MEASUREMENTS_FILE)
    predictions = read_json(folder / "eval_predictions.json")
    scored = [(qid, answers) for qid, answers in zip(questions["ids"], questions["answers"]) if qid in predictions]
    exact, f1 = question_scores(predictions, scored)
    ids = [qid for qid, _ in scored]
    if ids != questions["ids"][: len(ids)]:
        raise ValueError(f"{folder}: the predicted questions are not the first questions of {test_set}.")
    # The answers under every window scoring rule (the same logits), for the comparison of the rules.
    by_rule = read_json(folder / "eval_predictions_by_window_scoring.json") or {}
    rule_scores = {rule: question_scores(answers, scored) for rule, answers in by_rule.items()}
    summary = {
        "target_tokens": manifest["sets"][test_set]["target_tokens"],
        "window_scoring": metrics.get("window_scoring", "raw"),
        "exact_match": round(100 * float(np.mean(exact)), 2),
        "f1": round(100 * float(np.mean(f1)), 2),
        "by_window_scoring": {
            rule: {"exact_match": round(100 * float(np.mean(em)), 2), "f1": round(100 * float(np.mean(f)), 2)}
            for rule, (em, f) in rule_scores.items()
        },
        "metric_exact_match": round(metrics["exact_match"], 2),
        "metric_f1": round(metrics["f1"], 2),
        "eval_loss": None if metrics.get("eval_loss") is None else round(metrics["eval_loss"], 4),
        "questions": len(ids),
        "windows": metrics.get("eval_features"),
        "eval_seconds": metrics.get("eval_seconds"),
        "seconds_per_question": None
        if metrics.get("eval_seconds") is None
        else round(metrics["eval_seconds"] / len(ids), 4),
        "wall_seconds": measurements["wall_seconds"],
        "peak_rss_mb": measurements["peak_rss_mb"],
        "eval_batch_size": eval_batch_size(config, cell.max_seq_length),
    }
    scores = {"ids_sha256": ids_digest(ids), "em": exact, "f1": [round(value, 4) for value in f1]}
    if rule_scores:
        scores["by_window_scoring"] = {
            rule: {"em": em, "f1": [round(value, 4) for value in f]} for rule, (em, f) in rule_scores.items()
        }
    return summary, scores


def _starting_model(config: ComparisonConfig, cell: Cell, source: Path, names: Mapping[str, Path]) -> tuple[dict, str]:
    """The starting weights as the results record them, and the command that made the cell's model from them: the copy
    of a distilled encoder (its sha256 and the attention fields the cell changed), else the conversion of the source
    (its sha256 and the sequence length it was trained on)."""
    model = CellLayout(config, cell).model
    if cell.distilled_from:
        record = read_json(model / STARTING_MODEL_FILE) or planned_record(cell)
        command = copy_command(record, recorded_command([str(model)], names))
        return {**record, "distilled_from": record.pop("distilled"), "converted_from": recorded_path(source)}, command
    recorded = {"path": recorded_path(source)}
    if (source / "model.safetensors").is_file():
        recorded["sha256"] = sha256_of_file(source / "model.safetensors")
    conversion = read_json(model / "conversion_report.json") or {}
    if "source_sequence_length" in conversion:
        recorded["sequence_length"] = conversion["source_sequence_length"]
    return recorded, command_line("convert_roberta_to_blockbert.py", convert_args(config, cell, source), names)


def write_cell_results(
    config: ComparisonConfig, cell: Cell, manifest: Mapping, test_sets: Sequence[str], source: Path
) -> dict:
    """Writes `<results_dir>/<cell>/results.json` and `scores.json` from the work folder (atomically)."""
    layout = CellLayout(config, cell)
    test_sets = cell_sets(manifest, test_sets, cell)
    recipe = cell_recipe(config, cell)
    done = [name for name in test_sets if (layout.eval(name) / MEASUREMENTS_FILE).is_file()]
    questions = {name: set_questions(Path(config.data_dir) / manifest["sets"][name]["file"]) for name in done}
    _update_questions_file(config, questions)
    sets, scores = {}, {}
    for name in done:
        sets[name], scores[name] = _set_results(config, cell, manifest, name, questions[name])
    attempts = read_json(layout.train_log) or []
    # the --mixed_precision the training attempts ran with ("+"-joined; the configured one before any attempt)
    ran = [shlex.split(attempt["command"]) for attempt in attempts]
    precisions = [words[words.index("--mixed_precision") + 1] for words in ran if "--mixed_precision" in words[:-1]]
    per_device, accumulation = batch_sizes(config, cell)
    names = recorded_names(config, source)
    source_model, model_command = _starting_model(config, cell, source, names)
    # run_qa's log: the training loss (the mean over each logging interval) and the evaluations after each epoch
    logged = read_metrics(layout.train / "metrics.jsonl") if (layout.train / "metrics.jsonl").is_file() else []
    # The commands as they ran (the planned ones for steps that have not run yet), as the results record them.
    planned_minutes = estimated_train_minutes(config, cell, manifest)
    train_commands = [attempt["command"] for attempt in attempts] or [
        command_line("run_qa.py", train_args(config, cell, manifest, planned_minutes), names)
    ]
    eval_commands = [
        (read_json(layout.eval(name) / MEASUREMENTS_FILE) or {}).get("command")
        or command_line("run_qa.py", eval_args(config, cell, manifest, name), names)
        for name in test_sets
    ]
    results = {
        "cell": cell.record(),
        "label": cell.label,
        "recipe": {
            "learning_rate": recipe.learning_rate,
            "num_train_epochs": recipe.num_train_epochs,
            "negative_window_rate": recipe.negative_window_rate,
            "mixed_precision": "+".join(dict.fromkeys(precisions)) or config.mixed_precision,
            "eval_mixed_precision": config.eval_mixed_precision,
            "effective_batch_size": recipe.effective_batch_size,
            "per_device_train_batch_size": per_device,
            "gradient_accumulation_steps": accumulation,
            "warmup_ratio": config.warmup_ratio,
            "schedule": "linear",
            "doc_stride": config.doc_stride,
            "attention_probs_dropout_prob": config.attention_probs_dropout_prob,
            "hidden_dropout_prob": (read_json(layout.model / "config.json") or {}).get("hidden_dropout_prob"),
            "threads": config.threads,
            "max_train_samples": recipe.max_train_samples,
            "max_eval_samples": config.max_eval_samples,
            **({} if recipe.max_train_steps is None else {"max_train_steps": recipe.max_train_steps}),
        },
        "source_model": source_model,
        "train": {
            "finished": is_saved_model(layout.trained_model),
            # wall time of the attempts that ran to their end (a killed attempt's time is not known)
            "seconds": round(sum(attempt.get("seconds", 0.0) for attempt in attempts), 1),
            "attempts": len(attempts),
            "interrupted_attempts": sum(attempt["returncode"] is None for attempt in attempts),
            "resumed_attempts": sum(attempt.get("resumed_from") is not None for attempt in attempts),
            "peak_rss_mb": max((a["peak_rss_mb"] for a in attempts if a.get("peak_rss_mb")), default=None),
            "loss_curve": [
                {"step": record["step"], "loss": round(record["loss"], 4)} for record in logged if "loss" in record
            ],
            "epoch_evaluations": [
                {
                    "epoch": record["epoch"] + 1,  # counted from 1
                    "step": record["step"],
                    "eval_loss": round(record["eval_loss"], 4),
                    "exact_match": round(record["eval_exact_match"], 2),
                    "f1": round(record["eval_f1"], 2),
                }
                for record in logged
                if "eval_f1" in record
            ],
            # the machines of the attempts that recorded theirs
            "machines": list(dict.fromkeys(a["machine"] for a in attempts if a.get("machine"))),
        },
        "sets": sets,
        **({} if cell.convergence_check is None else {"convergence_check": convergence_record(config, cell)}),
        "finished": is_saved_model(layout.trained_model) and len(done) == len(test_sets),
        "commands": [model_command, *train_commands, *eval_commands],
    }
    write_json_atomically(layout.results / "results.json", results)
    write_json_atomically(layout.results / "scores.json", scores, indent=None)
    return results


# ---------------------------------------------------------------------------------------------------------------------
# The command line (experiments/qa_comparison.py)
# ---------------------------------------------------------------------------------------------------------------------

COMMANDS = ("run", "report")


def build_parser() -> argparse.ArgumentParser:
    """`qa_comparison.py {run,report} [options]`: both commands take the options of `ComparisonConfig`."""
    shown = dict(description=__doc__, formatter_class=HelpFormatter)
    parser = argparse.ArgumentParser(prog="qa_comparison.py", **shown)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=HfArgumentParser)
    for command in COMMANDS:
        commands.add_parser(command, dataclass_types=ComparisonConfig, prog=f"qa_comparison.py {command}", **shown)
    return parser


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] not in COMMANDS:
        print(f"usage: qa_comparison.py {{{','.join(COMMANDS)}}} [options] (--help for the options)\n\n{__doc__}")
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    options = vars(build_parser().parse_args(argv))
    command = options.pop("command")
    config = ComparisonConfig(**options)
    inputs = {"--data_dir": config.data_dir, "--squad_file": config.squad_file}
    try:
        for option in ("--work_dir", "--results_dir"):
            check_output_keeps_inputs(getattr(config, option[2:]), inputs, output_name=option)
        if config.recipe_dir is not None:
            config = apply_recipe_choice(config)
    except ValueError as error:  # an output that holds an input (OutputOverwritesInputError) or a bad recipe folder
        print(f"qa_comparison.py: {error}", file=sys.stderr)
        return 2
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    if command == "report":
        report = write_grid_report(config)
        print(f"Report of {len(report['cells'])} cell(s) written to {config.results_dir}/README.md")
        return 0
    try:
        if config.dry_run:
            print(format_plan(config, plan_comparison(config)))
            return 0
        failed = run_comparison(config)
    except (FileNotFoundError, ValueError) as error:  # a missing or wrong input: its reason, not a traceback
        print(f"qa_comparison.py: {error}", file=sys.stderr)
        return 2
    if failed:
        print(f"Failed cells (see the log above): {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0
