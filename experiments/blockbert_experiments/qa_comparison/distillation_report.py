"""The report of the distillation comparison's Stage A (`--grid distilled_table4`), as
`docs/long_document_decision_rule.md` (its amendments) fix it: each arm's F1 per set averaged over its seeds, the
choice of the distilled arm on the dev articles, the gaps with their paired article-bootstrap intervals and seed
spreads, the verdict on the target and whether self-distillation helped. Writes `README.md` and `results.json` in the
results folder."""

import json
import logging
from collections.abc import Mapping
from itertools import combinations
from pathlib import Path

import numpy as np

from blockbert_hf.saving import write_file_atomically, write_json_atomically

from .answer_blocks import ANSWER_BLOCKS_FILE
from .grid import ComparisonConfig
from .layout import read_json
from .scores import paired_article_bootstrap


logger = logging.getLogger(__name__)

# The arms by their cells' name before `_seed<k>`, in the order of the plan.
ARMS = {
    "a": ("n512_full", "full attention, converted (the teacher)"),
    "b": ("n512_n2_10-2", "n = 2 (10:2), converted"),
    "c": ("n512_n2_10-2_distilled", "n = 2 from the self-distilled encoder"),
    "d": ("n512_n2_10-2_distilled_kd", "(c) task-distilled from (a)"),
    "e": ("n512_n2_10-2_distilled_prefixed", "(c) with the question prefixed to each block"),
    "f": ("n512_n2_10-2_prefixed", "(b) with the question prefixed to each block (the control of (e))"),
}
DISTILLED_ARMS = ("c", "d", "e")  # in the order of the choice: a later arm must beat the one kept by more than TIE
SETS = ("dev_paragraph", "dev_window_512", "paragraph", "window_512")
CHOICE_SET = "dev_window_512"  # the distilled arm is chosen here, on seed 0
TIE = 0.5  # F1 within which the arm kept so far, the simpler, stays
TARGET, GOAL = 5.0, 2.0  # (a) minus the distilled arm on window_512, F1 points
TARGET_SET = "window_512"
BLOCK = 256  # tokens of a block of n = 2 at N = 512
RULE = "../../../docs/long_document_decision_rule.md"
SECOND_AMENDMENT = f"{RULE}#second-amendment-a-question-prefixed-arm-in-stage-a"
FOURTH_AMENDMENT = f"{RULE}#fourth-amendment-the-converted-control-of-e"
DISTILLATION_EFFECT = ("e", "f")  # the fourth amendment: (e) minus (f) on TARGET_SET says whether distillation helped


def arm_cells(results_dir: Path, named: Mapping[str, tuple[str, str]] = ARMS) -> dict[str, dict[int, dict]]:
    """Per arm of `named` (arm: cell name before `_seed<k>`, description), its finished cells by seed: the cell's
    `results.json` with its per-question `scores`."""
    arms: dict[str, dict[int, dict]] = {arm: {} for arm in named}
    for folder in sorted(Path(results_dir).iterdir()) if Path(results_dir).is_dir() else []:
        results, scores = read_json(folder / "results.json"), read_json(folder / "scores.json")
        if not results or not scores or not results.get("train", {}).get("finished"):
            continue
        prefix, _, seed = results["cell"]["name"].rpartition("_seed")
        arm = next((key for key, (name, _) in named.items() if name == prefix), None)
        if arm is not None:
            arms[arm][int(seed)] = {**results, "scores": scores}
    return arms


def seed_mean(cells: Mapping[int, dict], test_set: str) -> np.ndarray | None:
    """The per-question F1 (points) averaged over the seeds that scored the set; None where none did."""
    rows = [
        100 * np.asarray(cell["scores"][test_set]["f1"], dtype=float)
        for cell in cells.values()
        if test_set in cell["scores"]
    ]
    return np.mean(rows, axis=0) if rows else None


def seed_spread(cells: Mapping[int, dict], test_set: str) -> float | None:
    """The largest gap between two seeds' F1 on the set; None with fewer than two seeds."""
    f1 = [cell["sets"][test_set]["f1"] for cell in cells.values() if test_set in cell["sets"]]
    return max((abs(x - y) for x, y in combinations(f1, 2)), default=None)


def distilled_choice(arms: Mapping[str, Mapping[int, dict]]) -> dict:
    """The best of (c), (d) and (e) by seed-0 F1 on the dev articles' filled contexts, taken in that order: a later
    arm replaces the one kept only when more than `TIE` above it. Undecided until all three have that set."""
    f1 = {arm: arms[arm].get(0, {}).get("sets", {}).get(CHOICE_SET, {}).get("f1") for arm in DISTILLED_ARMS}
    if None in f1.values():
        return {"arm": None, "dev_f1": f1}
    kept = DISTILLED_ARMS[0]
    for arm in DISTILLED_ARMS[1:]:
        kept = arm if f1[arm] > f1[kept] + TIE else kept
    return {"arm": kept, "dev_f1": f1}


def compare(arms, first: str, second: str, test_set: str, known_spread: float | None, articles, config) -> dict | None:
    """`first` minus `second` on the set (seed-averaged per question), its bootstrap interval, both seed spreads and
    whether the amendment's rule resolves it."""
    mine, theirs = seed_mean(arms[first], test_set), seed_mean(arms[second], test_set)
    if mine is None or theirs is None:
        return None
    interval = paired_article_bootstrap(
        mine, theirs, articles[: len(mine)], samples=config.bootstrap_samples, seed=config.bootstrap_seed
    )
    spreads = {arm: seed_spread(arms[arm], test_set) for arm in (first, second)}
    used = [known_spread if spread is None else spread for spread in spreads.values()]
    excludes_zero = interval["low"] > 0 or interval["high"] < 0
    if not excludes_zero:
        status = "unresolved: the interval includes zero"
    elif None in used:
        status = "unresolved: no seed spread measured yet"
    elif abs(interval["difference"]) <= max(used):
        status = "unresolved: within the seed spread"
    else:
        status = "resolved"
    return {**interval, "seed_spreads": spreads, "spread_used": used, "status": status}


def stage_a_summary(config: ComparisonConfig, arms: Mapping[str, Mapping[int, dict]]) -> dict:
    """Everything the report states, from the finished cells of `config.results_dir` (`arm_cells`)."""
    questions = read_json(Path(config.results_dir) / "questions.json") or {}
    choice = distilled_choice(arms)
    table = {
        arm: {
            "seeds": sorted(cells),
            "f1": {s: float(np.mean(mean)) for s in SETS if (mean := seed_mean(cells, s)) is not None},
            "exact_match": {
                s: float(np.mean([c["sets"][s]["exact_match"] for c in cells.values() if s in c["sets"]]))
                for s in SETS
                if any(s in c["sets"] for c in cells.values())
            },
            "seed_spread": {s: seed_spread(cells, s) for s in SETS},
            "train_hours": [round(cells[seed]["train"]["seconds"] / 3600, 2) for seed in sorted(cells)],
            "final_train_loss": [
                (cells[seed]["train"]["loss_curve"] or [{}])[-1].get("loss") for seed in sorted(cells)
            ],
        }
        for arm, cells in arms.items()
        if cells
    }
    comparisons = {}
    chosen = choice["arm"]
    pairs = [("a", "b"), *(("a", arm) for arm in DISTILLED_ARMS), *((arm, "b") for arm in DISTILLED_ARMS)]
    pairs += [("a", "f"), DISTILLATION_EFFECT]
    for test_set in ("window_512", "paragraph"):
        measured = [spread for entry in table.values() if (spread := entry["seed_spread"].get(test_set)) is not None]
        known = max(measured, default=None)
        for first, second in pairs:
            articles = questions.get(test_set, {}).get("article", [])
            compared = compare(arms, first, second, test_set, known, articles, config)
            if compared is not None:
                comparisons.setdefault(f"{first}-{second}", {})[test_set] = compared
    verdict = None
    gap = comparisons.get(f"a-{chosen}", {}).get(TARGET_SET) if chosen else None
    if gap is not None:
        verdict = {
            "gap": gap["difference"],
            "interval": [gap["low"], gap["high"]],
            "target_met": gap["difference"] <= TARGET,
            "goal_met": gap["difference"] <= GOAL,
            "with_confidence": gap["high"] <= TARGET,
        }
    cells = [cell["cell"]["name"] for entry in arms.values() for cell in entry.values()]
    effect = comparisons.get("-".join(DISTILLATION_EFFECT), {}).get(TARGET_SET)
    distillation = None if effect is None else {
        "difference": effect["difference"], "interval": [effect["low"], effect["high"]], "status": effect["status"],
        "helped": effect["status"] == "resolved" and effect["difference"] > 0,
        "hurt": effect["status"] == "resolved" and effect["difference"] < 0,
    }  # fmt: skip
    by_block = f1_by_answer_block(arms, read_json(Path(config.results_dir) / ANSWER_BLOCKS_FILE))
    return {
        "cells": cells, "arms": table, "choice": choice, "comparisons": comparisons, "verdict": verdict,
        "distillation_effect": distillation, "f1_by_answer_block": by_block,
    }  # fmt: skip


def f1_by_answer_block(arms: Mapping[str, Mapping[int, dict]], positions: Mapping | None) -> dict:
    """Per filled set and arm, seed-averaged F1 where the answer starts in the first `BLOCK` tokens of its
    question-first window and where it starts past them (`answer_blocks.json`; sets whose questions differ from the
    scored ones are left out)."""
    result = {}
    for test_set, entry in ((positions or {}).get("sets") or {}).items():
        tokens = entry["answer_token"]
        halves = {
            "first": np.array([token is not None and token < BLOCK for token in tokens]),
            "second": np.array([token is not None and token >= BLOCK for token in tokens]),
        }
        by_arm = {}
        for arm, cells in arms.items():
            scored = [cell for cell in cells.values() if test_set in cell["scores"]]
            if not scored or any(cell["scores"][test_set]["ids_sha256"] != entry["ids_sha256"] for cell in scored):
                continue
            mean = seed_mean(cells, test_set)
            by_arm[arm] = {half: float(mean[mask].mean()) for half, mask in halves.items()}
        if by_arm:
            counts = {half: int(mask.sum()) for half, mask in halves.items()}
            result[test_set] = {"questions": counts, "f1": by_arm}
    return result


def number_text(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _arm_table(summary: Mapping) -> str:
    rows = ["| arm | model | seeds | " + " | ".join(f"{s} EM / F1" for s in SETS) + " | train h | last train loss |"]
    rows.append("|" + "---|" * (len(SETS) + 5))
    for arm, entry in summary["arms"].items():
        cells = [
            f"{number_text(entry['exact_match'].get(s))} / {number_text(entry['f1'].get(s))}"
            if s in entry["f1"]
            else "-"
            for s in SETS
        ]
        rows.append(
            f"| ({arm}) | {ARMS[arm][1]} | {', '.join(map(str, entry['seeds']))} | {' | '.join(cells)} | "
            f"{', '.join(map(str, entry['train_hours']))} | "
            f"{', '.join(number_text(loss, 3) for loss in entry['final_train_loss'])} |"
        )
    return "\n".join(rows)


def _comparison_table(summary: Mapping) -> str:
    rows = ["| difference | set | F1 points | 95% interval | seed spreads | rule |", "|---|---|---|---|---|---|"]
    for pair, by_set in summary["comparisons"].items():
        first, second = pair.split("-")
        for test_set, entry in by_set.items():
            spreads = ", ".join(f"({arm}) {number_text(value)}" for arm, value in entry["seed_spreads"].items())
            rows.append(
                f"| ({first}) - ({second}) | {test_set} | {entry['difference']:+.1f} | {entry['low']:+.1f} to "
                f"{entry['high']:+.1f} | {spreads} | {entry['status']} |"
            )
    return "\n".join(rows)


def _verdict_text(summary: Mapping) -> str:
    choice, verdict = summary["choice"], summary["verdict"]
    dev = ", ".join(f"({arm}) {number_text(f1)}" for arm, f1 in choice["dev_f1"].items())
    if choice["arm"] is None:
        text = f"The distilled arm is not chosen yet: (c), (d) and (e) all need seed-0 F1 on `{CHOICE_SET}` ({dev})."
    else:
        text = (
            f"**The distilled arm is ({choice['arm']})**: seed-0 F1 on `{CHOICE_SET}` {dev}; taken in that order, an "
            f"arm replaces the one kept only when it is more than {TIE} above it."
        )
    if verdict is None:
        return text + " The target's verdict waits for (a) and the distilled arm on the test sets."
    met = "met" if verdict["target_met"] else "missed"
    seeds = {arm: summary["arms"][arm]["seeds"] for arm in ("a", choice["arm"])}
    so_far = ""
    if any(len(arm_seeds) < 2 for arm_seeds in seeds.values()):
        run = "; ".join(f"({arm}) {', '.join(map(str, arm_seeds))}" for arm, arm_seeds in seeds.items())
        so_far = f" So far on seeds {run}: the rule judges the target once both have their second seed."
    return text + (
        f"\n\n**Target ({TARGET:g} F1, goal {GOAL:g}): {met}.** (a) minus ({choice['arm']}) on `{TARGET_SET}` is "
        f"{verdict['gap']:.1f} F1 (interval {verdict['interval'][0]:.1f} to {verdict['interval'][1]:.1f}); goal "
        f"{'met' if verdict['goal_met'] else 'missed'}; the interval's upper end "
        f"{'is' if verdict['with_confidence'] else 'is not'} within {TARGET:g}.{so_far}"
    )


def _distillation_effect_text(summary: Mapping) -> str:
    """Whether self-distillation helped, as the fourth amendment decides it: (e) minus (f) on `TARGET_SET`."""
    effect, (distilled, control) = summary["distillation_effect"], DISTILLATION_EFFECT
    if effect is None:
        return f"**Did self-distillation help?** Not known yet: ({control}) has no `{TARGET_SET}` results."
    low, high = effect["interval"]
    word = "yes" if effect["helped"] else ("no, it hurt" if effect["hurt"] else "not resolved")
    return (
        f"**Did self-distillation help?** {word.capitalize()}: ({distilled}) minus ({control}) on `{TARGET_SET}` is "
        f"{effect['difference']:+.1f} F1 (interval {low:+.1f} to {high:+.1f}; {effect['status']})."
    )


def _answer_block_table(summary: Mapping) -> str:
    by_block = summary["f1_by_answer_block"]
    if not by_block:
        return f"No `{ANSWER_BLOCKS_FILE}` for the scored questions yet."
    rows = ["| set | answer starts | questions | " + " | ".join(f"({arm})" for arm in ARMS) + " |"]
    rows.append("|" + "---|" * (len(ARMS) + 3))
    for test_set, entry in by_block.items():
        for half, where in (("first", f"in tokens 0-{BLOCK - 1}"), ("second", f"at token {BLOCK} or later")):
            f1 = [number_text(entry["f1"][arm][half]) if arm in entry["f1"] else "-" for arm in ARMS]
            rows.append(f"| {test_set} | {where} | {entry['questions'][half]:,} | {' | '.join(f1)} |")
    return "\n".join(rows)


DIFFERENCES_TEXT = (
    "Per question, F1 averaged over each arm's seeds; the interval is the paired bootstrap over articles (95%). A "
    "difference\nis resolved where the interval excludes zero and it exceeds both arms' seed spreads (for an arm with "
    "one seed, the\nlargest spread measured on that set here)."
)


def commands_section(grid: str, arms: Mapping[str, Mapping[int, dict]]) -> str:
    """The report's commands: every finished cell's, as it recorded them."""
    return f"""As each cell recorded them (`$WORK_DIR`, `$DATA_DIR`, `$DISTILLED_DIR`, `$MINILM`: the folders
`python experiments/qa_comparison.py run --grid {grid} ...` was given).

{recorded_commands(arms)}
"""


def write_report_files(folder: Path, text: str, summary: dict) -> dict:
    """`README.md` (`text`) and `results.json` (`summary`) of a results folder; returns `summary`."""
    write_file_atomically(folder / "README.md", text)
    write_json_atomically(folder / "results.json", json.loads(json.dumps(summary)))
    return summary


def recorded_commands(arms: Mapping[str, Mapping[int, dict]]) -> str:
    lines = []
    for arm, cells in arms.items():
        for seed, cell in sorted(cells.items()):
            lines += [f"# ({arm}) seed {seed}", *cell["commands"]]
    return "```bash\n" + "\n".join(lines) + "\n```" if lines else "No cell has finished yet."


def write_stage_a_report(config: ComparisonConfig) -> dict:
    """`README.md` and `results.json` of the results folder, from the cells finished so far."""
    folder = Path(config.results_dir)
    arms = arm_cells(folder)
    summary = stage_a_summary(config, arms)
    cells = [cell for entry in arms.values() for cell in entry.values()]
    answer_blocks_command = (read_json(folder / ANSWER_BLOCKS_FILE) or {}).get("command", "-")
    machines = sorted({machine for cell in cells for machine in cell["train"]["machines"]})
    text = f"""# Stage A: distilling a converted encoder into its blockwise self, at N = 512

Written from the cells finished so far by `python experiments/qa_comparison.py report --grid distilled_table4
--results_dir results/distillation/stage_a`, under the rule fixed before their test runs
([the amendment](../../../docs/long_document_decision_rule.md#amendment-the-distillation-comparison-on-a-2-core-cpu));
(e) was added by [a second amendment]({SECOND_AMENDMENT}) after (a) and (c) had test results, and before it ran;
(f) by [a fourth]({FOURTH_AMENDMENT}) after (e) had test results, and before it ran.
Every cell starts from all-MiniLM-L6-v2 (converted, or self-distilled as [results/distillation](../README.md)
describes), fine-tunes 2 epochs at learning rate 2e-4, batch 16, fp32, on the first half's questions with contexts
filled to 512 tokens, and is scored with null-relative window scoring on the dev articles, then on the test half's
paragraphs and contexts filled to 512 tokens. Training time is wall time, as each cell's record has it.

Machines: {"; ".join(machines) or "none yet"}.

## F1 per arm, averaged over seeds

{_arm_table(summary)}

## The choice and the target

{_verdict_text(summary)}

{_distillation_effect_text(summary)}

## F1 by where the answer starts

On the contexts filled to 512 tokens, seed-averaged F1 split by the token where the first answer starts in its
question-first window of 512 (`{ANSWER_BLOCKS_FILE}`, made by `{answer_blocks_command}`). With n = 2 in that layout,
tokens from {BLOCK} on form the second block, which reads the question only through the 2 heads of 12 shifted by one.
The split is a diagnostic, not part of the rule.

{_answer_block_table(summary)}

## Differences

{DIFFERENCES_TEXT}

{_comparison_table(summary)}

## Commands

{commands_section("distilled_table4", arms)}"""
    return write_report_files(folder, text, summary)
