"""The plan of a comparison run: what each cell still needs (conversion, training from the start or from a checkpoint,
the test sets without results), with time estimates from measured per-window costs, and the dry-run table."""

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from blockbert_benchmarks.measuring.machine import machine_description, machine_hardware
from blockbert_hf.train.runs import list_checkpoints

from .grid import PARAGRAPHS, Cell, ComparisonConfig, batch_sizes, cell_recipe, grid_cells, select_cells
from .layout import MEASUREMENTS_FILE, CellLayout, cell_sets, is_saved_model, read_json, read_manifest, test_set_names


# Seconds per window of N tokens with 2 threads, from the n512_full_seed0 cell's results
# (results/qa_comparison/n512_full_seed0/results.json: its train time over the windows it trained, its eval time over
# the windows of its filled sets); other N: linear in N. A window of t < N tokens costs about t / N of it. A finished
# cell with the same N and training set replaces the training estimate.
TRAIN_SECONDS_PER_WINDOW = {512: 0.38}
EVAL_SECONDS_PER_WINDOW = {512: 0.135}
WINDOWS_PER_QUESTION = 1.12  # filled training contexts: about 12% of the questions span two windows
ANSWER_WINDOWS_PER_QUESTION = 1.35  # whole-article contexts at N = 512, doc_stride 128: windows holding the answer
PARAGRAPH_TOKENS = 175  # median SQuAD paragraph plus question, in wordpieces
QUESTION_TOKENS = 20  # a question and the special tokens


def _per_window(table: Mapping[int, float], length: int) -> float:
    """The table's cost at N, linear in N between (and beyond) the measured lengths."""
    if length in table:
        return table[length]
    below = max((n for n in table if n < length), default=min(table))
    return table[below] * length / below


def estimated_steps(config: ComparisonConfig, cell: Cell, manifest: Mapping) -> int:
    """The optimizer steps of a cell's fine-tuning, from the training set's question count in the manifest."""
    entry = manifest["sets"].get(cell.training_set)
    first_half = max((e["questions"] for e in manifest["sets"].values() if e["half"] == "first"), default=5696)
    questions = entry["questions"] if entry else first_half  # the paragraphs set: every first-half question
    recipe = cell_recipe(config, cell)
    if recipe.max_train_samples is not None:
        questions = min(questions, recipe.max_train_samples)
    if cell.training_set == PARAGRAPHS:
        windows_per_question = 1.0
    elif entry and entry["target_tokens"] is None:  # whole articles: answer windows plus sampled negatives
        stats = (read_json(Path(config.data_dir) / "stats.json") or {}).get(cell.training_set, {})
        step = max(1, cell.max_seq_length - QUESTION_TOKENS - config.doc_stride)
        windows = math.ceil(stats.get("median", cell.max_seq_length) / step)
        negatives = max(0.0, windows - ANSWER_WINDOWS_PER_QUESTION) * recipe.negative_window_rate
        windows_per_question = ANSWER_WINDOWS_PER_QUESTION + negatives
    elif entry and entry["target_tokens"] > cell.max_seq_length:  # filled contexts longer than a window: slid over
        step = max(1, cell.max_seq_length - QUESTION_TOKENS - config.doc_stride)
        windows_per_question = 1 + math.ceil((entry["target_tokens"] - cell.max_seq_length) / step)
    else:
        windows_per_question = WINDOWS_PER_QUESTION
    windows = questions * windows_per_question
    steps = max(1, math.ceil(recipe.num_train_epochs * windows / recipe.effective_batch_size))
    return steps if recipe.max_train_steps is None else min(steps, recipe.max_train_steps)


def _measured_train_minutes(config: ComparisonConfig, cell: Cell) -> float | None:
    """The mean train time of finished cells with the same N and training set that trained on this machine's hardware
    (a time measured on a GPU says nothing of a CPU's), from their results files."""
    here = machine_hardware(machine_description())
    minutes = []
    for other in grid_cells(config):
        same_work = (other.max_seq_length, other.training_set, cell_recipe(config, other)) == (
            cell.max_seq_length,
            cell.training_set,
            cell_recipe(config, cell),
        )
        if not same_work:
            continue
        results = read_json(CellLayout(config, other).results / "results.json")
        machines = (results or {}).get("train", {}).get("machines") or []
        same_hardware = bool(machines) and all(machine_hardware(machine) == here for machine in machines)
        if results and results["train"].get("finished") and same_hardware:
            minutes.append(results["train"]["seconds"] / 60)
    return sum(minutes) / len(minutes) if minutes else None


def estimated_train_minutes(config: ComparisonConfig, cell: Cell, manifest: Mapping) -> float:
    """Measured on finished cells with the same N and training set on this hardware where there are any, else from the
    window costs."""
    measured = _measured_train_minutes(config, cell)
    if measured is not None:
        return measured
    windows = estimated_steps(config, cell, manifest) * cell_recipe(config, cell).effective_batch_size
    share = min(1.0, PARAGRAPH_TOKENS / cell.max_seq_length) if cell.training_set == PARAGRAPHS else 1.0
    return windows * share * _per_window(TRAIN_SECONDS_PER_WINDOW, cell.max_seq_length) / 60


def estimated_eval_minutes(config: ComparisonConfig, cell: Cell, manifest: Mapping, test_set: str) -> float:
    """The set's windows (from its median context length in `stats.json`) times the cost of a window at N."""
    stats = read_json(Path(config.data_dir) / "stats.json") or {}
    entry = stats.get(test_set, {"questions": manifest["sets"][test_set]["questions"], "median": PARAGRAPH_TOKENS})
    questions = min(entry["questions"], config.max_eval_samples or entry["questions"])
    length, tokens = cell.max_seq_length, entry["median"] + QUESTION_TOKENS
    step = max(1, length - QUESTION_TOKENS - config.doc_stride)  # new context tokens per extra window
    windows = 1 + max(0, math.ceil((tokens - length) / step))
    share = min(1.0, tokens / length) if windows == 1 else 1.0
    return questions * windows * share * _per_window(EVAL_SECONDS_PER_WINDOW, length) / 60


@dataclass
class CellPlan:
    """What a cell still needs and the estimated minutes of its training and evaluations."""

    cell: Cell
    convert: bool  # the converted model is not cached yet
    train: str  # "done", "start" or "resume from step K"
    eval_sets: list[str]  # the sets without results
    train_minutes: float
    eval_minutes: float


def plan_cell(config: ComparisonConfig, cell: Cell, manifest: Mapping, test_sets: Sequence[str]) -> CellPlan:
    """The cell's plan from what its work folder already holds."""
    layout = CellLayout(config, cell)
    estimate = estimated_train_minutes(config, cell, manifest)
    checkpoints = list_checkpoints(layout.train)
    if is_saved_model(layout.trained_model):
        train, train_minutes = "done", 0.0
    elif checkpoints:
        step = int(checkpoints[-1].name.removeprefix("step_"))
        train = f"resume from step {step}"
        train_minutes = estimate * max(0.0, 1 - step / estimated_steps(config, cell, manifest))
    else:
        train, train_minutes = "start", estimate
    test_sets = cell_sets(manifest, test_sets, cell)
    missing = [name for name in test_sets if not (layout.eval(name) / MEASUREMENTS_FILE).is_file()]
    eval_minutes = sum(estimated_eval_minutes(config, cell, manifest, name) for name in missing)
    return CellPlan(cell, not is_saved_model(layout.model), train, missing, train_minutes, eval_minutes)


def plan_comparison(config: ComparisonConfig, grid: Sequence[Cell] | None = None) -> list[CellPlan]:
    """The plan of every selected cell of `grid` (default: `config.grid`'s), in priority order."""
    cells = select_cells(config.cells, grid_cells(config) if grid is None else grid)  # unknown names: reported first
    manifest = read_manifest(config)
    test_sets = test_set_names(config, manifest)
    return [plan_cell(config, cell, manifest, test_sets) for cell in cells]


def format_plan(config: ComparisonConfig, plans: Sequence[CellPlan]) -> str:
    """The plan as a table: what each cell still needs and the estimated minutes, with a running total."""
    width = max([26, *(len(plan.cell.name) for plan in plans)])  # the cell names, aligned
    lines = [
        f"{'cell':<{width}} {'N':>5} {'pattern':<13} {'n':>2} {'heads':<8} {'seed':>4} {'train set':<11} {'batch':<6} "
        f"{'convert':<7} {'train':<22} {'eval sets':>9} {'train min':>9} {'eval min':>8} {'total h':>7}"
    ]
    total = 0.0
    for plan in plans:
        cell = plan.cell
        per_device, accumulation = batch_sizes(config, cell)
        total += plan.train_minutes + plan.eval_minutes
        lines.append(
            f"{cell.name:<{width}} {cell.max_seq_length:>5} {cell.attention_pattern:<13} {cell.num_blocks:>2} "
            f"{cell.heads_per_shift or '-':<8} {cell.seed:>4} {cell.training_set:<11} "
            f"{f'{per_device}x{accumulation}':<6} "
            f"{'yes' if plan.convert else 'cached':<7} {plan.train:<22} {len(plan.eval_sets):>9} "
            f"{plan.train_minutes:>9.0f} {plan.eval_minutes:>8.0f} {total / 60:>7.1f}"
        )
    lines.append(
        f"Estimated total: {total / 60:.1f} h with {config.threads} CPU thread(s) (rough: per-window costs of the "
        "n512_full_seed0 cell on the machine it ran on; training estimates are replaced by measured times as cells "
        "finish)."
    )
    return "\n".join(lines)
