"""The report of the recipe choice (`--grid recipe`, `epochs`, `layout`, `objective`, one results folder): the rules
fixed before the runs, the dev results, what they choose (`apply_recipe_choice` gives it to later runs), the commands.
"""

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from blockbert_hf.model.pipeline_question_answering import WINDOW_SCORING_RULES
from blockbert_hf.saving import write_file_atomically
from blockbert_hf.train.model_card import markdown_table

from .grid import (
    EPOCHS_GRID,
    LAYOUT_GRID,
    OBJECTIVE_GRID,
    RECIPE_EPOCHS,
    RECIPE_GRID,
    SCREENING_NEGATIVE_RATE,
    ComparisonConfig,
)
from .provenance import PRECISION
from .report import load_results


logger = logging.getLogger(__name__)

DEV_SETS = ("dev_paragraph", "dev_window_512", "dev_article")
# The rules, each fixed before its runs.
CHOICE_RULE = (
    "Rule: the learning rate with the highest dev F1 (null-relative scoring) averaged over the three dev sets, then "
    "the window scoring rule with the higher whole-article dev F1 at that rate. The test half is not read."
)
EPOCHS_RULE = (
    "Rule: of 2, 3 and 4 epochs, the count after which one 4-epoch run at the chosen rate scores the highest "
    "dev_window_512 F1; a tie goes to fewer epochs."
)
LAYOUT_RULE = (
    "Rule: of two runs at N = 1024 (n = 2, 10:2, one epoch at the chosen rate), the layout with the higher dev F1 "
    "averaged over the three dev sets under the chosen scoring; a tie goes to the question first."
)
OBJECTIVE_RULE = (
    "Rule: of two runs at N = 1024 (n = 2, 10:2, question-prefixed blocks, the chosen rate and epochs), the objective "
    "with the higher mean dev F1 under the chosen scoring: one softmax over the window (`window`) or one per block, "
    "each block's [CLS] the null label (`per_block`). A tie goes to `window`."
)


def _mean_f1(results: Mapping, rule: str) -> float | None:
    """The F1 under `rule` averaged over the dev sets; None while a set has no result yet."""
    sets = results["sets"]
    values = [sets.get(name, {}).get("by_window_scoring", {}).get(rule, {}).get("f1") for name in DEV_SETS]
    return None if any(value is None for value in values) else sum(values) / len(values)


def _row(name: str, results: Mapping) -> list[str]:
    """A run's recipe, final training loss (the mean over the last fifth of the logged intervals, the end of the
    epoch), train wall minutes (a resumed run's killed attempts are not timed) and dev results."""
    recipe, train = results.get("recipe", {}), results["train"]
    curve = train.get("loss_curve") or []
    tail = curve[-max(1, len(curve) // 5) :]
    minutes = f"{train['seconds'] / 60:.0f}" if train["finished"] else "running"
    if train["finished"] and train.get("resumed_attempts"):
        minutes += f" + the steps before {train['resumed_attempts']} resume(s)"
    cells = [
        name,
        f"{recipe.get('learning_rate', float('nan')):g}",
        f"{recipe.get('num_train_epochs', float('nan')):g}",
        f"{sum(point['loss'] for point in tail) / len(tail):.3f}" if tail else "-",
        minutes,
        PRECISION.get(recipe.get("mixed_precision"), recipe.get("mixed_precision", "-")),
    ]
    for set_name in DEV_SETS:
        measured = results["sets"].get(set_name, {})
        by_rule = measured.get("by_window_scoring", {})
        cells += [f"{by_rule[rule]['f1']:.1f}" if rule in by_rule else "-" for rule in WINDOW_SCORING_RULES]
        cells.append("-" if measured.get("eval_loss") is None else f"{measured['eval_loss']:.3f}")
    mean = _mean_f1(results, "null_relative")
    return [*cells, "-" if mean is None else f"{mean:.1f}"]


def recipe_choice(results: Mapping[str, Mapping]) -> dict | None:
    """The learning rate and window scoring `CHOICE_RULE` picks; None until every screening run has dev results."""
    finished = {name: entry for name, entry in results.items() if _mean_f1(entry, "null_relative") is not None}
    if len(finished) < len(RECIPE_GRID):
        return None
    best = max(finished, key=lambda name: _mean_f1(finished[name], "null_relative"))
    article = finished[best]["sets"]["dev_article"]["by_window_scoring"]
    rule = max(WINDOW_SCORING_RULES, key=lambda r: article[r]["f1"])
    return {"cell": best, "learning_rate": finished[best]["recipe"]["learning_rate"], "window_scoring": rule}


def epochs_choice(results: Mapping[str, Mapping], choice: Mapping | None) -> dict | None:
    """The epochs `EPOCHS_RULE` picks; None until the run at the chosen rate was evaluated after each epoch."""
    if choice is None:
        return None
    for name, entry in results.items():
        if entry["recipe"]["learning_rate"] != choice["learning_rate"]:
            continue
        f1 = {point["epoch"]: point["f1"] for point in entry["train"].get("epoch_evaluations", [])}
        if all(epochs in f1 for epochs in RECIPE_EPOCHS):
            best = max(RECIPE_EPOCHS, key=lambda epochs: (f1[epochs], -epochs))
            return {"cell": name, "num_train_epochs": float(best), "dev_window_512_f1": f1[best]}
    return None


def run_choice(results: Mapping, grid, recipe: Mapping | None, rule: str | None, fields: Sequence[str]) -> dict | None:
    """The run of `grid` with the highest mean dev F1 under `rule` among those trained with `recipe` (key -> chosen
    value), a tie to the first (`LAYOUT_RULE`, `OBJECTIVE_RULE`), with its cell's `fields`; None until all have one."""
    if recipe is None:
        return None
    runs = {
        name: entry
        for name, entry in results.items()
        if all(entry["recipe"][key] == value for key, value in recipe.items()) and _mean_f1(entry, rule) is not None
    }
    if len(runs) < len(grid):
        return None
    order = [cell.name for cell in grid]
    best = max(runs, key=lambda name: (_mean_f1(runs[name], rule), -order.index(name)))
    return {"cell": best, **{field: runs[best]["cell"][field] for field in fields}}


def _epoch_rows(results: Mapping[str, Mapping]) -> list[list[str]]:
    """One row per evaluated epoch of the epoch runs: the training loss logged last before it, dev loss, EM, F1."""
    rows = []
    for name, entry in results.items():
        curve = entry["train"].get("loss_curve") or []
        for point in entry["train"].get("epoch_evaluations", []):
            before = [logged["loss"] for logged in curve if logged["step"] <= point["step"]]
            loss = f"{before[-1]:.3f}" if before else "-"
            scores = f"{point['eval_loss']:.3f}", f"{point['exact_match']:.1f}", f"{point['f1']:.1f}"
            rows.append([name, str(point["epoch"]), str(point["step"]), loss, *scores])
    return rows


@dataclass
class RecipeRuns:
    """A recipe folder's runs (all, and by grid), the four choices (None until made) and the runs still to do."""

    found: dict
    screening: dict
    epoch_runs: dict
    layout_runs: dict
    objective_runs: dict
    choice: dict | None
    epochs: dict | None
    layout: dict | None
    objective: dict | None
    pending: list


def recipe_runs(config: ComparisonConfig) -> RecipeRuns:
    """The runs in `config.results_dir` and the choices their rules make."""
    grids = RECIPE_GRID + EPOCHS_GRID + LAYOUT_GRID + OBJECTIVE_GRID
    found = load_results(config, grids)

    def runs_of(grid) -> dict:
        return {name: entry for name, entry in found.items() if name in {cell.name for cell in grid}}

    epoch_runs, layout_runs, objective_runs = runs_of(EPOCHS_GRID), runs_of(LAYOUT_GRID), runs_of(OBJECTIVE_GRID)
    later = {**epoch_runs, **layout_runs, **objective_runs}
    screening = {name: entry for name, entry in found.items() if name not in later}
    choice = recipe_choice(screening)
    epochs = epochs_choice(epoch_runs, choice)
    rate = choice and {"learning_rate": choice["learning_rate"]}
    rule = choice and choice["window_scoring"]
    layout = run_choice(layout_runs, LAYOUT_GRID, rate, rule, ("window_layout", "block_relative_positions"))
    rate_and_epochs = epochs and {**rate, "num_train_epochs": epochs["num_train_epochs"]}
    objective = run_choice(objective_runs, OBJECTIVE_GRID, rate_and_epochs, rule, ("qa_objective",))
    pending = [cell.name for cell in grids if cell.name not in found]
    return RecipeRuns(
        found, screening, epoch_runs, layout_runs, objective_runs, choice, epochs, layout, objective, pending
    )


def apply_recipe_choice(config: ComparisonConfig) -> ComparisonConfig:
    """`config` with the recipe chosen in `config.recipe_dir` (the training objective defaults to `window`, with a
    warning, until chosen); a `ValueError` that says what to run where another choice is not made yet."""
    runs = recipe_runs(replace(config, results_dir=config.recipe_dir, grid="recipe"))
    choice, epochs, layout = runs.choice, runs.epochs, runs.layout
    missing = [what for what, made in (("learning rate", choice), ("epochs", epochs), ("layout", layout)) if not made]
    if missing:
        raise ValueError(
            f"{config.recipe_dir} has no {', '.join(missing)} chosen yet: run `qa_comparison.py run --grid recipe`, "
            "then `--grid epochs` and `--grid layout` at the chosen rate, into that folder first."
        )
    if runs.objective is None and config.grid == "comparison":
        logger.warning(
            f"{config.recipe_dir} has no training objective chosen yet (`qa_comparison.py run --grid objective`): the "
            "long models train with the window objective."
        )
    return replace(
        config,
        learning_rate=choice["learning_rate"],
        num_train_epochs=epochs["num_train_epochs"],
        window_scoring=choice["window_scoring"],
        long_window_layout=layout["window_layout"],
        long_block_relative_positions=layout["block_relative_positions"],
        long_qa_objective=runs.objective["qa_objective"] if runs.objective else "window",
    )


def write_recipe_report(config: ComparisonConfig) -> dict:
    """Writes `README.md` of the recipe choice into the results folder from the recipe runs' results."""
    runs = recipe_runs(config)
    choice, epochs, layout, objective = runs.choice, runs.epochs, runs.layout, runs.objective
    header = ["cell", "lr", "epochs", "final train loss", "train wall min", "training precision"]
    for set_name in DEV_SETS:
        header += [f"{set_name} F1 ({rule})" for rule in WINDOW_SCORING_RULES] + [f"{set_name} loss"]
    header.append("mean F1 (null_relative)")

    def runs_table(found: Mapping[str, Mapping], what: str) -> str:
        rows = [_row(name, entry) for name, entry in found.items()]
        return markdown_table(header, rows) if rows else f"No {what} run has results yet.\n"

    def choice_text(made: str | None, missing: str) -> str:
        return "**Choice**: " + (made or f"not yet ({missing}).") + "\n"

    epoch_header = ["cell", "epoch", "step", "train loss", "dev_window_512 loss", "EM", "F1"]
    positions = layout and (
        "positions restarting in every block." if layout["block_relative_positions"] else "running positions."
    )
    chosen_rate = f" --learning_rate {choice['learning_rate']:g}" if choice else " --learning_rate <the chosen rate>"
    options = f"--results_dir {config.results_dir} --effective_batch_size {config.effective_batch_size} "
    options += f"--mixed_precision {config.mixed_precision}"
    recipe_dir = f" --recipe_dir {config.results_dir}"
    extra = {"recipe": "", "epochs": chosen_rate, "layout": chosen_rate, "objective": recipe_dir}  # after `--grid X`
    text = [
        "# Choosing the fine-tuning recipe on the dev articles\n",
        "Full attention at N = 512, one epoch per learning rate on the first half's whole articles (dev articles "
        f"held out; windows without the answer kept at rate {SCREENING_NEGATIVE_RATE}), batch "
        f"{config.effective_batch_size}, {config.warmup_ratio:.0%} warmup; dev F1 under both window scoring rules. "
        "Train minutes: wall time on the machine listed under the commands. Each rule below was fixed before its "
        "runs.\n",
        CHOICE_RULE + "\n",
        runs_table(runs.screening, "screening"),
        f"Still to run: {', '.join(runs.pending)}.\n" if runs.pending else "",
        choice_text(
            choice and f"learning rate {choice['learning_rate']:g}, window scoring `{choice['window_scoring']}`.",
            "every screening run needs its dev results",
        ),
        f"## Epochs\n\n{EPOCHS_RULE}\n\nAfter each epoch:\n",
        markdown_table(epoch_header, _epoch_rows(runs.epoch_runs))
        if runs.epoch_runs
        else "No epoch run has results yet.\n",
        "At the end of the run:\n",
        runs_table(runs.epoch_runs, "epoch"),
        choice_text(
            epochs and f"{epochs['num_train_epochs']:g} epochs (dev_window_512 F1 {epochs['dev_window_512_f1']:.1f}).",
            "the epoch run needs its dev F1 after each epoch",
        ),
        f"## The long model's window layout\n\n{LAYOUT_RULE}\n",
        runs_table(runs.layout_runs, "layout"),
        choice_text(layout and f"`{layout['window_layout']}`, {positions}", "both layout runs need their dev results"),
        f"## The long model's training objective\n\n{OBJECTIVE_RULE}\n",
        runs_table(runs.objective_runs, "objective"),
        choice_text(
            objective and f"`{objective['qa_objective']}`.",
            "both objective runs need their dev results at the chosen learning rate and epochs",
        ),
        "## Commands\n\n```bash",
        *(
            f"python experiments/qa_comparison.py run --grid {grid}{at_rate} --data_dir $DATA_DIR --work_dir $WORK_DIR "
            + options
            for grid, at_rate in extra.items()
        ),
        "python experiments/qa_comparison.py report --grid recipe " + options,
        "```\n\nThe steps each run ran:\n\n```bash",
        "\n".join(command for entry in runs.found.values() for command in entry["commands"]),
        "```\n\nWhere each run trained:\n",
        *(
            f"- {name}: {'; '.join(entry['train'].get('machines') or ['not recorded'])}"
            for name, entry in runs.found.items()
        ),
        "",
    ]
    write_file_atomically(Path(config.results_dir) / "README.md", "\n".join(text))
    choices = {key: getattr(runs, key) for key in ("choice", "epochs", "layout", "objective", "pending")}
    return {"cells": list(runs.found), **choices}
