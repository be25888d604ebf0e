"""The report in the results folder, from whatever cells have results: `README.md` (grid, recipe, results, intervals,
seed spread, cost, commands), `results.json` and the F1-vs-context-length plot."""

import json
import logging
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path

from blockbert_benchmarks.measuring.machine import hardware_text
from blockbert_hf.saving import write_file_atomically, write_json_atomically
from blockbert_hf.train.model_card import markdown_table

from ..minilm import MINILM_VARIABLE
from .grid import GRID, Cell, ComparisonConfig
from .layout import DATA_DIR_VARIABLE, WORK_DIR_VARIABLE, missing_keys, read_json
from .provenance import driver_commands, reading_notes, recipe_section
from .scores import (
    compare_cells,
    full_attention_pairs,
    long_arm_verdicts,
    same_seed_pairs,
    seed_averaged_verdicts,
    seed_pairs,
    whole_article_scores,
)


logger = logging.getLogger(__name__)


# The keys the report reads from a cell's files, nested as there (None: a value).
_CELL_KEYS = dict.fromkeys(("name", "max_seq_length", "attention_pattern", "seed", "train_set"))
RESULTS_KEYS = {"cell": _CELL_KEYS, "label": None, "train": {"finished": None}}
RESULTS_KEYS.update(dict.fromkeys(("sets", "finished", "commands")))
_SET_KEYS = dict.fromkeys(("exact_match", "f1", "seconds_per_question", "peak_rss_mb"))
_SCORES_KEYS = dict.fromkeys(("ids_sha256", "em", "f1"))


def _read_cell_file(path: Path, default=None):
    """A cell's JSON file (`default` where it does not exist), or a `ValueError` naming the file and the problem."""
    try:
        found = read_json(path)
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: is not readable JSON ({error})") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: could not be read ({error})") from None
    return default if found is None else found


def _read_cell(folder: Path) -> dict:
    """A cell's `results.json` with its `scores.json` (under `scores`), checked for every key the report reads."""
    path = folder / "results.json"
    results = _read_cell_file(path)
    missing = missing_keys(results, RESULTS_KEYS)
    if not missing:
        if results["train"]["finished"] and "seconds" not in results["train"]:
            missing.append("train.seconds")
        if isinstance(results["sets"], Mapping):
            for name, measured in results["sets"].items():
                keys = {**_SET_KEYS, "target_tokens": None} if name.startswith("sweep_") else _SET_KEYS
                missing += missing_keys(measured, keys, f"sets.{name}.")
        else:
            missing.append("sets (a JSON object of test sets)")
    if missing:
        raise ValueError(f"{path}: has no {', '.join(missing)}")
    path = folder / "scores.json"
    scores = _read_cell_file(path, default={})
    keys = dict.fromkeys(scores, _SCORES_KEYS) if isinstance(scores, Mapping) else {}  # the same keys for every set
    if missing := missing_keys(scores, keys):
        raise ValueError(f"{path}: has no {', '.join(missing)}")
    return {**results, "scores": scores}


def load_results(config: ComparisonConfig, grid: Sequence[Cell] = GRID, skipped: dict | None = None) -> dict:
    """Every cell's results in the results folder, grid cells first; one that cannot be read or lacks a key the report
    reads is left out with a warning (and recorded in `skipped`, cell name -> problem)."""
    folder = Path(config.results_dir)
    names = [cell.name for cell in grid]
    found = sorted(path.parent.name for path in folder.glob("*/results.json")) if folder.is_dir() else []
    ordered = [name for name in names if name in found] + [name for name in found if name not in names]
    results = {}
    for name in ordered:
        try:
            results[name] = _read_cell(folder / name)
        except ValueError as error:
            logger.warning(f"{error}; cell {name} is skipped in the report.")
            if skipped is not None:
                skipped[name] = str(error).removeprefix(f"{folder / name}/")
    return results


def _set_order(results: Mapping[str, dict]) -> list[str]:
    """The table columns: `paragraph`, the sweep by context length, then the rest (`article`)."""
    names = list(dict.fromkeys(name for entry in results.values() for name in entry["sets"]))
    sweep = sorted(
        (n for n in names if n.startswith("sweep_")),
        key=lambda n: next(entry["sets"][n]["target_tokens"] for entry in results.values() if n in entry["sets"]),
    )
    return [n for n in names if n == "paragraph"] + sweep + [n for n in names if n not in sweep and n != "paragraph"]


def _per_set(per_set: Mapping, sets: Sequence[str], text) -> list[str]:
    """One column per set: `text` of the set's entry, or "-" where there is none."""
    return [text(per_set[name]) if name in per_set else "-" for name in sets]


def _bracket(value: Mapping | None) -> str:
    return "-" if value is None else f"{value['difference']:+.1f} [{value['low']:+.1f}, {value['high']:+.1f}]"


def _em_f1(measured: Mapping) -> str:
    return f"{measured['exact_match']:.1f} / {measured['f1']:.1f}"


def results_table(results: Mapping[str, dict], sets: Sequence[str]) -> str:
    """EM / F1 per test set, one row per cell."""
    rows = [[f"`{name}`", entry["label"], *_per_set(entry["sets"], sets, _em_f1)] for name, entry in results.items()]
    return markdown_table(["cell", "model", *(f"{s} EM / F1" for s in sets)], rows)


def intervals_table(compared: Mapping[str, dict], sets: Sequence[str]) -> str:
    """The F1 difference to the reference with its 95% interval, per set."""
    rows = [
        [f"`{name}`", *_per_set(per_set, sets, lambda v: _interval_text(v["f1"]))] for name, per_set in compared.items()
    ]
    return markdown_table(["cell", *sets], rows)


def _interval_text(value: Mapping) -> str:
    """A difference with its 95% interval; bold where the interval excludes zero."""
    text = _bracket(value) + (" (1 article)" if value["articles"] < 2 else "")
    return f"**{text}**" if value["excludes_zero"] else text


def whole_article_table(measured: Mapping[str, dict]) -> str:
    """Per cell and window scoring rule, as `whole_article_scores` gives it."""
    rows = []
    for name, entry in measured.items():
        for rule, value in entry["by_window_scoring"].items():
            ratio = f"{value['ratio']:.2f}"
            if "ratio_low" in value:
                ratio += f" [{value['ratio_low']:.2f}, {value['ratio_high']:.2f}]"
            difference = _interval_text(entry["null_relative_minus_raw"]) if rule == "null_relative" else "-"
            rows.append([f"`{name}`", f"`{rule}`", _em_f1(value), f"{value['paragraph_f1']:.1f}", ratio, difference])
    header = ["cell", "window scoring", "whole articles EM / F1", "own paragraphs F1", "ratio [95%]"]
    return markdown_table([*header, "difference to raw"], rows)


def verdicts_table(verdicts: Mapping[str, dict], sets: Sequence[str], reference: str = "baseline") -> str:
    """One row per configuration and set, as `seed_averaged_differences` gives it."""

    def spread(value: float | None) -> str:
        return "one seed" if value is None else f"{value:.1f}"

    rows = [
        [
            f"`{name}`",
            test_set,
            ", ".join(str(seed) for seed in entry["seeds"]),
            _bracket(entry["f1"]),
            _bracket(entry.get("t_interval")),
            _bracket(entry["interval"]),
            f"{entry['interval']['smallest_detectable_effect']:.1f}",
            ", ".join(f"{value:+.1f} ({seed})" for seed, value in entry["against_each_reference_seed"].items()),
            f"{spread(entry['seed_spread']['configuration'])} / {spread(entry['seed_spread']['baseline'])}",
            entry["verdict"],
            "yes" if entry["interval"]["excludes_zero"] else "no",
        ]
        for name, per_set in verdicts.items()
        for test_set in sets
        if (entry := per_set.get(test_set))
    ]
    header = ["configuration (first cell)", "set", "seeds", "F1 difference, article bootstrap [95%]"]
    header += ["t over seeds [95%]", "wider [95%]", "smallest detectable effect"]
    header += [f"against each {reference} seed", f"seed spread (it / {reference})", "verdict", "wider excludes 0"]
    return markdown_table(header, rows)


def _cost_text(measured: Mapping) -> str:
    seconds, memory = measured["seconds_per_question"], measured["peak_rss_mb"]
    return f"{seconds:.3f} s, {memory / 1024:.2f} GB" if seconds is not None and memory else f"{seconds} s, -"


def cost_table(results: Mapping[str, dict], sets: Sequence[str]) -> str:
    """Forward seconds per question and the evaluating process's peak RSS (GB), per set."""
    rows = []
    for name, entry in results.items():
        train = entry["train"]
        hours = f"{train['seconds'] / 3600:.2f} h" if train["finished"] else "unfinished"
        if train["finished"] and train.get("resumed_attempts"):
            # a killed attempt's time is not known, so a resumed training's time leaves out the steps it resumed from
            hours = f"{hours} + the steps before {train['resumed_attempts']} resume(s)"
        machine = hardware_text(train.get("machines") or []) or "not recorded"
        rows.append([f"`{name}`", machine, hours, *_per_set(entry["sets"], sets, _cost_text)])
    return markdown_table(["cell", "machine", "train time", *sets], rows)


def loss_table(results: Mapping[str, dict]) -> str:
    """The training loss each cell's run logged, by optimizer step; empty when no cell has one."""
    curves = {
        name: {p["step"]: p["loss"] for p in entry["train"].get("loss_curve", [])} for name, entry in results.items()
    }
    steps = sorted({step for curve in curves.values() for step in curve})
    if not steps:
        return ""
    rows = [
        [f"`{name}`", *(f"{curve[step]:.2f}" if step in curve else "-" for step in steps)]
        for name, curve in curves.items()
    ]
    return markdown_table(["cell", *(f"step {step}" for step in steps)], rows)


def plot_label(cell: Mapping) -> str:
    """A cell's name for a reader of the plot: how the model reads a long context, and its seed."""
    length, seed = cell["max_seq_length"], cell["seed"]
    if cell["attention_pattern"] == "full":
        return f"full attention, sliding windows of {length} (seed {seed})"
    if cell["attention_pattern"] == "blockwise":
        heads = f" ({cell['heads_per_shift']})" if cell.get("heads_per_shift") else ""
        return f"BlockBERT, {length} tokens at once, n = {cell['num_blocks']}{heads} (seed {seed})"
    return f"{cell['attention_pattern']}, windows of {length} (seed {seed})"


def plot_sweep(results: Mapping[str, dict], path: Path) -> bool:
    """F1 against the sweep's context length, a line per cell, F1 from 0; False where no cell has sweep results."""
    from matplotlib.figure import Figure  # not pyplot: no backend or open figures to manage

    lines = []
    for entry in results.values():
        points = sorted(
            (measured["target_tokens"], measured["f1"])
            for set_name, measured in entry["sets"].items()
            if set_name.startswith("sweep_")
        )
        if points:
            lines.append((plot_label(entry["cell"]), points))
    if not lines:
        return False
    figure = Figure(figsize=(8, 5))
    axes = figure.subplots()
    for name, points in lines:
        lengths, f1 = zip(*points)
        axes.plot(lengths, f1, marker="o", label=name)
    axes.set_xscale("log", base=2)
    ticks = sorted({length for _, points in lines for length, _ in points})
    axes.set_xticks(ticks, [str(t) for t in ticks])
    axes.set(xlabel="context length T (wordpieces; the same questions at every T)", ylabel="F1", ylim=(0, 100))
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    write_file_atomically(path, lambda target: figure.savefig(target, format="png", dpi=120))
    return True


README_INTRO = """# Long-document QA: full, sparse and blockwise attention from the same real weights

Every cell converts all-MiniLM-L6-v2 to its N and [attention pattern](../../docs/attention.md), fine-tunes it with
`examples/run_qa.py` on the first half of SQuAD v1.1 dev and tests it on the second (disjoint articles; [the
long-context QA data](../../docs/qa_long_context_data.md)). Written by `python experiments/qa_comparison.py report`:
`results.json` holds every number, `<cell>/results.json` and `<cell>/scores.json` each cell's own, `questions.json`
the question ids and articles that `scores.json` follows.
"""

N2048_CHOICE = (
    "**N = 2048 uses n = 4** (blocks of 512, 6:2:2:2): each block holds the encoder's 512 trained positions once.\n"
)
INTERVALS_NOTE = (
    "The wider of the article bootstrap and a t-interval over the per-seed differences counts ([decision rule]"
    "(../../docs/long_document_decision_rule.md)); its half-width is the smallest detectable effect."
)


# The sections that compare cells, in the README's order, each left out where it has nothing to show: the key of
# `results.json` it shows, its heading and text ({baseline}, {bootstrap} filled in), its table.
_INTERVALS = "(F1 points, 95% interval)"
COMPARISON_SECTIONS = (
    ("differences_to_baseline", f"Differences to `{{baseline}}` {_INTERVALS}", "{bootstrap}", intervals_table),
    (
        "differences_at_the_same_seed",
        f"Differences to the baseline's configuration at the same seed {_INTERVALS}",
        "",
        intervals_table,
    ),
    (
        "differences_at_the_same_window",
        f"Differences to full attention at the same N {_INTERVALS}",
        "Against the full-attention cell with the same N, seed and training set.",
        intervals_table,
    ),
    (
        "differences_to_sliding_windows",
        f"The long-document arm: differences to sliding windows of 512 {_INTERVALS}",
        "Against full attention at N = 512, same data and seed.",
        intervals_table,
    ),
    (
        "long_arm_verdicts",
        "The long-document arm averaged over seeds (F1 points)",
        f"As the Verdicts section, against sliding windows of 512. {INTERVALS_NOTE}",
        partial(verdicts_table, reference="sliding-window"),
    ),
    (
        "whole_articles",
        "Whole articles against the questions' own paragraphs",
        "`raw`: the highest start + end logit of all windows; `null_relative`: the span that most exceeds its window's "
        "null score. Intervals: article bootstrap, 95%.",
        lambda scores, sets: whole_article_table(scores),
    ),
    (
        "seed_averaged_verdicts",
        "Verdicts: differences to `{baseline}`'s configuration averaged over seeds (F1 points)",
        "Per-question F1 differences at the same seed, averaged over seeds. *Resolved*: the interval excludes zero and "
        f"the gap exceeds both configurations' seed spread (largest gap between two seeds). {INTERVALS_NOTE}",
        verdicts_table,
    ),
    ("seed_spread", "Seed spread (F1 points, second seed minus first, 95% interval)", "", intervals_table),
)


def write_report(config: ComparisonConfig, grid: Sequence[Cell] = GRID) -> dict:
    """Writes `README.md`, `results.json` and the plot from the cells that have results; returns `results.json`."""
    folder, baseline = Path(config.results_dir), config.baseline
    skipped: dict[str, str] = {}
    results = load_results(config, grid, skipped)
    questions = read_json(folder / "questions.json") or {}
    pairs = [(name, baseline) for name in results if name != baseline] if baseline in results else []
    same_seed = same_seed_pairs(results, baseline)
    finished = [name for name, entry in results.items() if entry["finished"]]
    compare = partial(compare_cells, config, results, questions)
    comparisons = {  # by the key of `results.json` that holds each
        "differences_to_baseline": compare(pairs),
        "differences_at_the_same_seed": compare(same_seed),
        "differences_at_the_same_window": compare(full_attention_pairs(results, pairs + same_seed)),
        "differences_to_sliding_windows": compare(full_attention_pairs(results, pairs, windows_of=512)),
        "whole_articles": whole_article_scores(config, results, questions),
        "seed_spread": compare(seed_pairs(results)),
        "seed_averaged_verdicts": seed_averaged_verdicts(config, results, questions, baseline),
        "long_arm_verdicts": long_arm_verdicts(config, results, questions),
    }
    pending = [cell.name for cell in grid if cell.name not in finished]
    sets = _set_order(results)

    parts = [README_INTRO]
    if (summary := folder / "summary.md").is_file():
        parts.append("## Summary\n\n" + summary.read_text(encoding="utf-8").strip() + "\n")
    if notes := reading_notes(results, questions):
        parts.append(notes)
    status = {name: "finished" if name in finished else "partial" for name in results}
    rows = [
        [f"`{c.name}`", c.label, str(c.max_seq_length), c.training_set, status.get(c.name, "not run")] for c in grid
    ]
    left_out = "; ".join(f"`{name}` ({problem})" for name, problem in skipped.items())
    parts.append(
        "## Grid\n\n"
        + markdown_table(["cell", "model", "N", "training set", "status"], rows)
        + f"\nCells not (fully) measured: {', '.join(f'`{n}`' for n in pending) or 'none'}.\n\n"
        + (f"Cells left out of this report (a file of theirs could not be read): {left_out}.\n\n" if left_out else "")
        + N2048_CHOICE
    )
    parts.append(recipe_section(results))
    if results:
        parts.append("## Results (EM / F1)\n\n" + results_table(results, sets))
    if plot_sweep(results, folder / "f1_vs_context_length.png"):
        parts.append("## F1 against context length\n\n![F1 against context length](f1_vs_context_length.png)\n")
    bootstrap = (
        f"Paired article bootstrap ({config.bootstrap_samples:,} resamples, seed {config.bootstrap_seed}); bold: the "
        "interval excludes zero."
    )
    filled = dict(baseline=baseline, bootstrap=bootstrap)
    parts += [
        f"## {heading.format(**filled)}\n\n"
        + (f"{text.format(**filled)}\n\n" if text else "")
        + table(comparisons[key], sets)
        for key, heading, text, table in COMPARISON_SECTIONS
        if comparisons[key]
    ]
    if results:
        parts.append(
            "## Cost: eval seconds per question and peak memory, train time\n\nOn each cell's machine (an upper bound "
            "for cells run together with `--jobs`).\n\n" + cost_table(results, sets)
        )
        if losses := loss_table(results):
            parts.append("## Training loss\n\nAs run_qa logged it:\n\n" + losses)
        steps = "\n".join(f"# {name}\n" + "\n".join(entry["commands"]) for name, entry in results.items())
        parts.append(
            "## Commands\n\nFrom the repository root: the [test sets](../../docs/qa_long_context_data.md), then one "
            "`run` per group of cells whose recorded recipes agree.\n\n```bash\n"
            + driver_commands(results, config, grid)
            + f"```\n\nThe steps of each cell (`{MINILM_VARIABLE}`: the installed all-MiniLM-L6-v2, "
            f"`{DATA_DIR_VARIABLE}`: the test sets, `{WORK_DIR_VARIABLE}`: the work folder):\n\n```bash\n"
            + steps
            + "\n```\n"
        )
    cells = {name: {k: v for k, v in entry.items() if k != "scores"} for name, entry in results.items()}
    report = {"baseline": baseline, "finished": finished, "pending": pending, "cells": cells, **comparisons}
    write_file_atomically(folder / "README.md", "\n".join(parts))
    write_json_atomically(folder / "results.json", report)
    return report
