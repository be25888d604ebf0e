"""The report of the distillation comparison's Stage B (`--grid distilled_long`), as
`docs/long_document_decision_rule.md` (its first, third and sixth amendments) fixes it: each arm's F1 per set averaged
over its seeds, its dev F1 and convergence checks, `D` (BlockBERT 10:2 minus sliding windows) and `D'` (10:2 minus
12:0) with their paired article-bootstrap intervals and seed spreads, and the verdict over whole articles. Writes
`README.md` and `results.json` in the results folder."""

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from .distillation_report import (
    DIFFERENCES_TEXT,
    arm_cells,
    commands_section,
    compare,
    number_text,
    seed_mean,
    seed_spread,
    write_report_files,
)
from .grid import SCREENING_NEGATIVE_RATE, STAGE_B_CONVERGENCE_CHECK, STAGE_B_TRAINING, ComparisonConfig
from .layout import read_json


ARMS = {
    "sliding": ("n512_full_article", "sliding windows of 512, full attention, converted"),
    "10:2": ("n1024_n2_10-2_distilled", "BlockBERT N = 1024, n = 2, 10:2, self-distilled"),
    "12:0": ("n1024_n2_12-0_distilled", "the same with 12:0: no head reads the other block (the lower bound)"),
}
DIFFERENCES = {"D": ("10:2", "sliding"), "D'": ("10:2", "12:0")}
SETS = ("article",)
DEV_SETS = ("dev_window_512", "dev_article")  # read before any test set: the convergence check's and the articles'
VERDICT_SET = "article"
AT_OR_ABOVE = -1.0  # F1: D's interval lies above this (within the paper's effect size of sliding windows, or better)
RULE = "../../../docs/long_document_decision_rule.md"
THIRD_AMENDMENT = f"{RULE}#third-amendment-stage-b-on-the-encoder-distilled-at-n--512"
SIXTH_AMENDMENT = f"{RULE}#sixth-amendment-stage-b-on-the-recipe-chosen-on-the-dev-articles"


def stage_b_verdict(differences: Mapping[str, Mapping]) -> dict | None:
    """The first amendment's Stage B verdict from `D` and `D'` over whole articles; None until `D` is measured."""
    d, d_prime = differences.get("D"), differences.get("D'")
    if d is None:
        return None
    resolved = d["status"] == "resolved"
    helps = resolved and d["difference"] > 0 and d_prime is not None and d_prime["status"] == "resolved"
    helps = helps and d_prime["difference"] > 0
    if helps:
        verdict = "BlockBERT helps"
    elif d["low"] > AT_OR_ABOVE:
        verdict = "BlockBERT at or above sliding windows"
    elif resolved and d["difference"] < 0:
        verdict = "below sliding windows"
    else:
        verdict = "inconclusive"
    return {
        "verdict": verdict,
        "D": d["difference"],
        "D_interval": [d["low"], d["high"]],
        "D_prime_measured": bool(d_prime),
    }


def stage_b_summary(config: ComparisonConfig, arms: Mapping[str, Mapping[int, dict]]) -> dict:
    """Everything the report states, from the finished cells of `config.results_dir`."""
    questions = read_json(Path(config.results_dir) / "questions.json") or {}
    table = {
        arm: {
            "seeds": sorted(cells),
            "f1": {s: float(np.mean(mean)) for s in DEV_SETS + SETS if (mean := seed_mean(cells, s)) is not None},
            "seed_spread": {s: seed_spread(cells, s) for s in SETS},
            "convergence_checks": {seed: cells[seed].get("convergence_check") for seed in sorted(cells)},
            "train_hours": [round(cells[seed]["train"]["seconds"] / 3600, 2) for seed in sorted(cells)],
            "final_train_loss": [
                (cells[seed]["train"]["loss_curve"] or [{}])[-1].get("loss") for seed in sorted(cells)
            ],
        }
        for arm, cells in arms.items()
        if cells
    }
    differences = {}
    for test_set in SETS:
        measured = [spread for entry in table.values() if (spread := entry["seed_spread"].get(test_set)) is not None]
        articles = questions.get(test_set, {}).get("article", [])
        for name, (first, second) in DIFFERENCES.items():
            compared = compare(arms, first, second, test_set, max(measured, default=None), articles, config)
            if compared is not None:
                differences.setdefault(name, {})[test_set] = compared
    verdict = stage_b_verdict(
        {name: by_set[VERDICT_SET] for name, by_set in differences.items() if VERDICT_SET in by_set}
    )
    cells = [cell["cell"]["name"] for entry in arms.values() for cell in entry.values()]
    ended_by = failed_baseline_checks(arms)
    return {"cells": cells, "arms": table, "differences": differences, "verdict": verdict, "ended_by": ended_by}


def failed_baseline_checks(arms: Mapping[str, Mapping[int, dict]]) -> list[dict]:
    """The sliding-windows cells that failed their convergence check: under the sixth amendment, any one of them ends
    Stage B without a verdict on the CPU."""
    return [
        {"cell": cell["cell"]["name"], "seed": seed, "sets": cell["convergence_check"]["sets"]}
        for seed, cell in sorted(arms.get("sliding", {}).items())
        if (cell.get("convergence_check") or {}).get("passed") is False
    ]


def _check_text(check: Mapping | None) -> str:
    if check is None:
        return "-"
    if check["passed"] is None:
        return "waiting"
    return f"{'passed' if check['passed'] else 'failed'} ({', '.join(number_text(c['f1']) for c in check['sets'])})"


def _arm_table(summary: Mapping) -> str:
    sets = DEV_SETS + SETS
    rows = ["| arm | model | seeds | " + " | ".join(f"{s} F1" for s in sets) + " | check | train h | last train loss |"]
    rows.append("|" + "---|" * (len(sets) + 6))
    for arm, entry in summary["arms"].items():
        f1 = " | ".join(number_text(entry["f1"].get(s)) for s in sets)
        rows.append(
            f"| {arm} | {ARMS[arm][1]} | {', '.join(map(str, entry['seeds']))} | {f1} | "
            f"{', '.join(map(_check_text, entry['convergence_checks'].values()))} | "
            f"{', '.join(map(str, entry['train_hours']))} | "
            f"{', '.join(number_text(loss, 3) for loss in entry['final_train_loss'])} |"
        )
    return "\n".join(rows)


def _recipe_text() -> str:
    """What every cell trains on and how, from the grid."""
    checks = " and ".join(f"F1 {minimum:g} on `{dev_set}`" for dev_set, minimum in STAGE_B_CONVERGENCE_CHECK)
    return f"""fine-tunes one epoch of every whole-article training question (windows without the answer kept
at rate {SCREENING_NEGATIVE_RATE:g}) at learning rate {STAGE_B_TRAINING["learning_rate"]:g} (warmup 10%, linear
decay), batch {STAGE_B_TRAINING["effective_batch_size"]} windows, fp32, batches drawn at random. Each cell is
evaluated on the dev articles first (`{"`, `".join(DEV_SETS)}`); a sliding-windows cell must reach {checks} before
the test set is read (the check column); BlockBERT cells are scored whatever their dev F1, and one below the
sliding-windows check failed to train rather than measured its attention"""


def _difference_table(summary: Mapping) -> str:
    rows = ["| difference | set | F1 points | 95% interval | seed spreads | rule |", "|---|---|---|---|---|---|"]
    for name, by_set in summary["differences"].items():
        first, second = DIFFERENCES[name]
        for test_set, entry in by_set.items():
            spreads = ", ".join(f"{arm} {number_text(value)}" for arm, value in entry["seed_spreads"].items())
            rows.append(
                f"| {name} = {first} - {second} | {test_set} | {entry['difference']:+.1f} | {entry['low']:+.1f} to "
                f"{entry['high']:+.1f} | {spreads} | {entry['status']} |"
            )
    return "\n".join(rows)


def _verdict_text(summary: Mapping) -> str:
    verdict = summary["verdict"]
    if summary["ended_by"]:
        failures = "; ".join(
            f"`{failed['cell']}`: "
            + ", ".join(
                f"F1 {number_text(s['f1'])} on `{s['set']}` against its {s['min_f1']:g}" for s in failed["sets"]
            )
            for failed in summary["ended_by"]
        )
        return (
            f"**No verdict on the CPU.** The sliding-windows baseline failed its convergence check ({failures}), so no "
            f"test set was read and, as the [sixth amendment]({SIXTH_AMENDMENT}) fixed before the run, Stage B ends "
            "here: no further amendment changes its budget. The commands below for sets that were not evaluated are "
            "the planned ones."
        )
    if verdict is None:
        return "No verdict yet: `D` needs BlockBERT 10:2 and sliding windows on `article`."
    low, high = verdict["D_interval"]
    waiting = "" if verdict["D_prime_measured"] else " `D'` waits for 12:0."
    measured = f"`D` = {verdict['D']:+.1f} F1 on `{VERDICT_SET}` ({low:+.1f} to {high:+.1f})"
    return f"**{verdict['verdict']}**: {measured}.{waiting}"


def write_stage_b_report(config: ComparisonConfig) -> dict:
    """`README.md` and `results.json` of the results folder, from the cells finished so far."""
    folder = Path(config.results_dir)
    arms = arm_cells(folder, ARMS)
    summary = stage_b_summary(config, arms)
    machines = sorted(
        {machine for entry in arms.values() for cell in entry.values() for machine in cell["train"]["machines"]}
    )
    text = f"""# Stage B: BlockBERT against sliding windows over whole articles, at N = 1024

Written from the cells finished so far by `python experiments/qa_comparison.py report --grid distilled_long
--results_dir {config.results_dir}`, under the rule fixed before any of its runs ([the third]({THIRD_AMENDMENT}) and
[sixth amendments]({SIXTH_AMENDMENT})). Every cell starts from all-MiniLM-L6-v2 (converted, or self-distilled at
N = 512 as [results/distillation](../README.md) describes; no cell is task-distilled), {_recipe_text()}. The test set
is the test half's whole articles (`article`, the verdict's), scored with null-relative window scoring. Training time
is wall time, as each cell's record has it.

Machines: {"; ".join(machines) or "none yet"}.

## F1 per arm, averaged over seeds

{_arm_table(summary)}

## The verdict

{_verdict_text(summary)}

## Differences

{DIFFERENCES_TEXT}

{_difference_table(summary)}

## Commands

{commands_section("distilled_long", arms)}"""
    return write_report_files(folder, text, summary)
