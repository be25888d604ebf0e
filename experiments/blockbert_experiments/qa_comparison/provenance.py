"""How the report's cells were made, from what each `results.json` records (not the `report` command's options): the
recipe table, the commands that run the cells again, and the notes on what the results can say."""

import gzip
import json
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from blockbert_benchmarks.measuring.machine import hardware_text

from ..minilm import MINILM_DEFINITION, MINILM_INSTALL, MINILM_VARIABLE
from .grid import BASELINE, Cell, ComparisonConfig
from .layout import DATA_DIR_VARIABLE, SQUAD_DEV, WORK_DIR_VARIABLE


REPO_ROOT = Path(__file__).resolve().parents[3]
# The 8 SQuAD v1.1 dev articles `make demo` (experiments/demo.py) fine-tunes on.
DEMO_TRAINING_FILE = Path("data/samples/squad_v1.1_dev_train_articles.json.gz")
NOT_RECORDED = "not recorded"
PRECISION = {"no": "fp32", "bf16": "bf16 autocast"}
TOKEN_RANGES = ("train_tokens_per_batch", "eval_tokens_per_batch")  # options a record fixes as a range of values
LAYOUTS = {"question_first": "the question first", "question_prefixed_blocks": "the question prefixed to every block"}


def _value(recipe: Mapping, key: str, text=str) -> str:
    return NOT_RECORDED if recipe.get(key) is None else text(recipe[key])


def _questions(recipe: Mapping, key: str) -> str:
    """How many questions a cell's `max_*_samples` record kept (None: all)."""
    return NOT_RECORDED if key not in recipe else "all" if recipe[key] is None else f"the first {recipe[key]}"


def recipe_settings(entry: Mapping) -> dict[str, str]:
    """What one cell ran with, as its record says it: setting -> value, in the README's words."""
    recipe, cell, machines = entry.get("recipe") or {}, entry["cell"], entry["train"].get("machines") or []
    batch = _value(recipe, "effective_batch_size")
    if per_device := recipe.get("per_device_train_batch_size"):
        accumulation = recipe["gradient_accumulation_steps"]
        batch = f"{recipe['effective_batch_size']} ({per_device} per device x {accumulation} accumulation)"
    hidden = "as converted" if recipe.get("hidden_dropout_prob") is None else f"{recipe['hidden_dropout_prob']:g}"
    scoring = sorted(
        {measured["window_scoring"] for measured in entry["sets"].values() if "window_scoring" in measured}
    )
    threads = sorted({int(found) for line in machines for found in re.findall(r"torch uses (\d+) threads", line)})
    positions = "restarting in every block" if cell.get("block_relative_positions") else "running on"
    return {
        "starting weights": "converted, no blockwise pre-training or adaptation",
        "epochs": _value(recipe, "num_train_epochs", lambda v: f"{v:g}"),
        "learning rate": _value(recipe, "learning_rate", lambda v: f"{v:g}"),
        "windows per optimizer step": batch,
        "schedule": _value(recipe, "schedule", lambda v: f"{v}, {recipe.get('warmup_ratio', 0):.0%} warmup"),
        "training windows without the answer": _value(
            recipe, "negative_window_rate", lambda rate: "all kept" if rate >= 1 else f"kept at rate {rate:g}"
        ),
        "window overlap": _value(recipe, "doc_stride", lambda v: f"{v} tokens"),
        "dropout": _value(recipe, "attention_probs_dropout_prob", lambda v: f"attention {v:g}, hidden {hidden}"),
        "window layout": f"{LAYOUTS.get(cell.get('window_layout'), cell.get('window_layout'))}, positions {positions}",
        "training objective": f"`{cell.get('qa_objective', 'window')}`",
        "window scoring": ", ".join(f"`{rule}`" for rule in scoring) or NOT_RECORDED,
        "training precision": _value(recipe, "mixed_precision", lambda v: PRECISION.get(v, v)),
        "evaluation precision": _value(recipe, "eval_mixed_precision", lambda v: PRECISION.get(v, v)),
        "training questions": _questions(recipe, "max_train_samples"),
        "evaluation questions": _questions(recipe, "max_eval_samples"),
        "trained on": hardware_text(machines) or NOT_RECORDED,
        "torch threads while training": ", ".join(map(str, threads)) or NOT_RECORDED,
    }


def recipe_section(results: Mapping[str, dict]) -> str:
    """The README's Recipe section: one row per setting where every cell ran the same, else one row per value naming
    its cells (the largest group last, as "the other cells")."""
    per_cell = {name: recipe_settings(entry) for name, entry in results.items()}
    rows = []
    for setting in next(iter(per_cell.values()), {}):
        groups: dict[str, list[str]] = {}
        for name, settings in per_cell.items():
            groups.setdefault(settings[setting], []).append(name)
        ordered = sorted(groups.items(), key=lambda group: len(group[1]))  # stable: ties keep their first appearance
        for index, (value, names) in enumerate(ordered):
            cells = ", ".join(f"`{name}`" for name in names)
            if index == len(ordered) - 1:
                cells = f"{'all' if len(ordered) == 1 else 'the other'} {len(names)}"
            rows.append(f"| {setting if index == 0 else ''} | {value} | {cells} |")
    if not rows:
        return "## Recipe\n\nNo cell has results yet.\n"
    return (
        "## Recipe\n\nWhat each cell ran, as its `results.json` records it: a row per value where cells differ. Eval "
        "time is the forward pass per question, peak memory the evaluating process's RSS high-water mark.\n\n"
        "| setting | value | cells |\n|---|---|---|\n" + "\n".join(rows) + "\n"
    )


def _token_range(per_device: int, max_seq_length: int, effective: int | None = None) -> tuple[float, float]:
    """The `--train_tokens_per_batch` (with `effective`, as `batch_sizes` divides the effective batch) or
    `--eval_tokens_per_batch` values that give `per_device` windows per batch at N."""
    larger = [d for d in range(per_device + 1, effective + 1) if effective % d == 0] if effective else [per_device + 1]
    return per_device * max_seq_length, larger[0] * max_seq_length - 1 if larger else math.inf


def run_options(entry: Mapping, grid: str) -> dict | None:
    """The `run` options a cell's record fixes (a range of values for `TOKEN_RANGES`); None without a recipe record."""
    recipe, cell = entry.get("recipe"), entry["cell"]
    if not recipe:
        return None
    own = [key for key in ("learning_rate", "num_train_epochs", "negative_window_rate") if cell.get(key) is not None]
    keys = ("learning_rate", "num_train_epochs", "negative_window_rate", "effective_batch_size", "warmup_ratio")
    keys += ("doc_stride", "attention_probs_dropout_prob", "mixed_precision", "eval_mixed_precision")
    keys += ("max_train_samples", "max_eval_samples")  # None: all questions, the default
    options = {key: recipe[key] for key in keys if recipe.get(key) is not None and key not in own}
    for key in ("mixed_precision", "eval_mixed_precision"):
        if "+" in options.get(key, ""):  # attempts that ran with different precisions fix no single option
            del options[key]
    if recipe.get("per_device_train_batch_size") and recipe.get("effective_batch_size"):
        per_device, effective = recipe["per_device_train_batch_size"], recipe["effective_batch_size"]
        options["train_tokens_per_batch"] = _token_range(per_device, cell["max_seq_length"], effective)
    commands = entry.get("commands") or []
    eval_batches = {int(size) for line in commands for size in re.findall(r"--per_device_eval_batch_size (\d+)", line)}
    if len(eval_batches) == 1:  # all recorded evaluation steps used one batch
        options["eval_tokens_per_batch"] = _token_range(eval_batches.pop(), cell["max_seq_length"])
    scoring = {measured["window_scoring"] for measured in entry["sets"].values() if "window_scoring" in measured}
    if len(scoring) == 1:
        options["window_scoring"] = scoring.pop()
    if cell["max_seq_length"] > 512 and cell["attention_pattern"] == "blockwise":  # what the --long_* options set
        options["long_window_layout"] = cell["window_layout"]
        options["long_block_relative_positions"] = cell["block_relative_positions"]
        if grid == "comparison" or cell["num_blocks"] > 1:
            options["long_qa_objective"] = cell.get("qa_objective", "window")
    return options


def _merged(shared: Mapping, options: Mapping) -> dict | None:
    """`shared` and `options` as one run's options, or None where they disagree."""
    merged = dict(shared)
    for key, value in options.items():
        if key not in merged:
            merged[key] = value
        elif key in TOKEN_RANGES:
            low, high = max(merged[key][0], value[0]), min(merged[key][1], value[1])
            if low > high:
                return None
            merged[key] = (low, high)
        elif merged[key] != value:
            return None
    return merged


def run_groups(results: Mapping[str, dict], grid: str) -> list[tuple[list[str], dict]]:
    """The cells in groups that one `run` command reproduces (their recorded options agree), with those options."""
    groups: list[tuple[list[str], dict]] = []
    for name, entry in results.items():
        options = run_options(entry, grid)
        if options is None:
            continue
        for index, (names, shared) in enumerate(groups):
            if (merged := _merged(shared, options)) is not None:
                groups[index] = ([*names, name], merged)
                break
        else:
            groups.append(([name], options))
    return groups


def _option_text(key: str, value) -> str:
    if key in TOKEN_RANGES:
        value = value[0]  # the smallest that gives the recorded batches
    if isinstance(value, bool):
        value = str(value).lower()
    elif isinstance(value, float):
        value = f"{value:g}"
    return f"--{key} {value}"


def _wrapped(words: Sequence[str], width: int = 110) -> str:
    """A shell command over several lines, breaking only between `words`."""
    lines = [words[0]]
    for word in words[1:]:
        if len(lines[-1]) + 1 + len(word) > width:
            lines[-1] += " \\"
            lines.append("    " + word)
        else:
            lines[-1] += " " + word
    return "\n".join(lines)


def driver_commands(results: Mapping[str, dict], config: ComparisonConfig, grid: Sequence[Cell]) -> str:
    """The shell lines that build the test sets, run each group of agreeing cells as recorded and write the report."""
    lines = [
        MINILM_INSTALL,
        MINILM_DEFINITION,
        f"SQUAD=path/to/dev-v1.1.json.gz  # {SQUAD_DEV}",
        f"{DATA_DIR_VARIABLE[1:]}=outputs/long_qa_data",
        f"{WORK_DIR_VARIABLE[1:]}=outputs/qa_comparison",
        _wrapped(
            ["python experiments/build_long_context_qa.py --squad_file $SQUAD", f"--tokenizer {MINILM_VARIABLE}"]
            + [f"--output_dir {DATA_DIR_VARIABLE}"]
        ),
    ]
    common = [f"--grid {config.grid}"] * (config.grid != "comparison")
    common += [f"--results_dir {config.results_dir}"] * (config.results_dir != ComparisonConfig.results_dir)
    names = [cell.name for cell in grid]
    for cells, options in run_groups(results, config.grid):
        words = ["python experiments/qa_comparison.py run --squad_file $SQUAD", f"--data_dir {DATA_DIR_VARIABLE}"]
        words += [f"--work_dir {WORK_DIR_VARIABLE}", *common]
        words += [] if sorted(cells) == sorted(names) else ["--cells " + " ".join(cells)]
        lines.append(_wrapped(words + [_option_text(key, value) for key, value in options.items()]))
    report = ["python experiments/qa_comparison.py report", *common]
    report += [f"--baseline {config.baseline}"] * (config.baseline != BASELINE)
    for key in ("bootstrap_samples", "bootstrap_seed"):
        if getattr(config, key) != getattr(ComparisonConfig, key):
            report.append(f"--{key} {getattr(config, key)}")
    lines.append(_wrapped(report))
    unrecorded = [name for name, entry in results.items() if not entry.get("recipe")]
    note = f"\n# {', '.join(unrecorded)}: no recipe recorded, so no command runs them as they ran" if unrecorded else ""
    return "\n".join(lines) + note + "\n"


TEST_HALF_NOTE = (
    "**The test half was evaluated during early development**, before the dev articles were held out for choosing "
    "the recipe ([qa_recipe](../qa_recipe/README.md))."
)


def demo_note(questions: Mapping[str, dict]) -> str:
    """Which of the demo's training articles are test articles here (with their `paragraph` questions), else empty."""
    path = REPO_ROOT / DEMO_TRAINING_FILE
    if not path.is_file():
        return ""
    with gzip.open(path, "rt", encoding="utf-8") as file:
        demo = [article["title"] for article in json.load(file)["data"]]
    tested = {title for entry in questions.values() for title in entry.get("titles", [])}
    shared = [title for title in demo if title in tested]
    if not shared:
        return ""
    count = ""
    if questions.get("paragraph", {}).get("titles"):
        titles, articles = questions["paragraph"]["titles"], questions["paragraph"]["article"]
        inside = sum(titles[article] in shared for article in articles)
        count = f", with {inside:,} of the {len(articles):,} `paragraph` questions"
    return (
        f"**The demo trains on test articles**: of the {len(demo)} articles `make demo` fine-tunes on, "
        f"{len(shared)} of them ({', '.join(shared)}) are test articles here{count}. Do not score a demo model on "
        "these sets."
    )


def weights_note(results: Mapping[str, dict]) -> str:
    """That every cell starts from converted weights only, and what that makes N = 512; empty without cells."""
    if not results:
        return ""
    text = (
        "**Converted and fine-tuned, not pre-trained with their attention** (no adaptation, "
        "`experiments/adaptation.py`): every cell here starts from an encoder pre-trained with full attention, so "
        "heads that read another block learn it from fine-tuning alone."
    )
    if any(e["cell"]["max_seq_length"] == 512 and e["cell"]["attention_pattern"] != "full" for e in results.values()):
        text += " At N = 512 this is not a replication of the paper's Table 4."
    return text


def reading_notes(results: Mapping[str, dict], questions: Mapping[str, dict]) -> str:
    """The README's section on what these results can and cannot say; empty where there is nothing to note."""
    notes = []
    if any(entry["cell"].get("eval_half", "second") == "second" for entry in results.values()):
        notes.append(TEST_HALF_NOTE)
    notes += [note for note in (demo_note(questions), weights_note(results)) if note]
    return "## Reading these results\n\n" + "\n\n".join(f"- {note}" for note in notes) + "\n" if notes else ""
