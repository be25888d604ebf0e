"""The card of a model fine-tuned by the long-context QA comparison (`experiments/qa_comparison.py`).

Its metadata, including the `model-index` of EM/F1 per test set, and every number in its text are read from the cell's
`results.json`, next to the commands that produced them; the card records that file's path (`results_file` in its
metadata) so that it can be checked against it.
"""

import json
import os
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path

from huggingface_hub import EvalResult, ModelCard

from blockbert_benchmarks.measuring.machine import hardware_text, recorded_path
from blockbert_hf.configuration_blockbert import BlockBertConfig

from ..minilm import MINILM_DEFINITION, MINILM_VARIABLE
from ..qa_comparison.layout import DATA_DIR_VARIABLE, WORK_DIR_VARIABLE, missing_keys
from ..qa_comparison.scores import configuration_key, equal_window_pairs, sliding_window_pairs
from .common import (
    CITATION,
    REPOSITORY,
    _base_model,
    _bullets,
    _card,
    _check_fine_tuned,
    _config_limitations,
    _differences,
    _generated_note,
    _heads_text,
    _model_rows,
    _qa_card_data,
    _qa_usage,
    _read_model_config,
    _read_results_json,
    _squad_eval_results,
    _table,
)


# The folders the recorded commands name rather than give (`qa_comparison.layout.recorded_names`).
COMMAND_VARIABLES = {
    MINILM_VARIABLE: "the model folder of the installed all-MiniLM-L6-v2, set by the first line",
    DATA_DIR_VARIABLE: "the folder of the long-context sets (`experiments/build_long_context_qa.py`)",
    WORK_DIR_VARIABLE: "the comparison's work folder (converted models, checkpoints, predictions)",
}
ATTENTION_ROLES = {
    "full": "full attention (the paper's RoBERTa-1seq role)",
    "sparse_fixed": "the sparse fixed pattern (the paper's SparseBERT role)",
}


# The keys the card reads from a cell's results file, nested as there (None: a value).
RESULTS_KEYS = {
    "cell": dict.fromkeys(("name", "max_seq_length", "attention_pattern", "num_blocks", "seed")),
    "label": None,
    "recipe": dict.fromkeys(
        (
            "learning_rate",
            "num_train_epochs",
            "effective_batch_size",
            "per_device_train_batch_size",
            "gradient_accumulation_steps",
            "warmup_ratio",
            "schedule",
            "doc_stride",
            "threads",
        )
    ),
    "train": dict.fromkeys(("finished",)),
    "sets": None,
    "commands": None,
}
_SET_KEYS = dict.fromkeys(("questions", "exact_match", "f1"))
_FINISHED_TRAIN_KEYS = dict.fromkeys(("seconds", "attempts"))


def read_results(path: str | os.PathLike) -> dict:
    """A cell's `results.json` as `experiments/qa_comparison.py` writes it, with an error naming the file and every key
    the card reads that it lacks."""
    path = Path(path)
    writer = "experiments/qa_comparison.py"
    results = _read_results_json(path, writer)
    missing = missing_keys(results, RESULTS_KEYS)
    if isinstance(results.get("train"), Mapping) and results["train"].get("finished"):
        missing += missing_keys(results["train"], _FINISHED_TRAIN_KEYS, "train.")
    if isinstance(results.get("sets"), Mapping):
        for name, measured in results["sets"].items():
            missing += missing_keys(measured, _SET_KEYS, f"sets.{name}.")
    elif "sets" in results:
        missing.append("sets (an object of test sets)")
    if isinstance(results.get("commands"), str) or not isinstance(results.get("commands", []), list):
        missing.append("commands (a list of commands)")
    if missing:
        raise ValueError(f"{path} is not a complete results file of {writer}: it has no {', '.join(missing)}.")
    return results


def _check_model_matches(config: BlockBertConfig, cell: Mapping, model_dir: Path, results_file: Path) -> None:
    """The model folder must hold the configuration the results were measured with."""
    expected = {"attention_pattern": cell["attention_pattern"], "N": cell["max_seq_length"]}
    found = {"attention_pattern": config.attention_pattern, "N": config.max_sequence_length}
    if cell["attention_pattern"] == "blockwise":
        expected["num_blocks"], found["num_blocks"] = cell["num_blocks"], config.num_blocks
        if cell.get("heads_per_shift"):
            expected["heads_per_shift"] = cell["heads_per_shift"]
            found["heads_per_shift"] = _heads_text(config.heads_per_shift)
    differing = _differences(expected, found)
    if differing:
        raise ValueError(
            f"{model_dir} is not the model of {results_file} (cell {cell['name']}): "
            + ", ".join(differing)
            + ". Pass the folder that cell trained (WORK_DIR/cells/<cell>/train/model)."
        )


def _set_description(name: str, measured: Mapping) -> str:
    if name == "paragraph":
        return "the answer paragraph as it is"
    if name == "article":
        return "the whole article"
    if measured.get("target_tokens") and name.startswith("window_"):
        return (
            f"the answer paragraph, filled so that question and context fit one window of "
            f"{measured['target_tokens']:,} tokens"
        )
    if measured.get("target_tokens"):
        return f"the answer paragraph filled with neighbouring paragraphs to {measured['target_tokens']:,} tokens"
    return name


def _eval_results(results: Mapping) -> list[EvalResult]:
    return [
        entry
        for name, measured in results["sets"].items()
        for entry in _squad_eval_results(
            name,
            f"SQuAD v1.1 dev, held-out articles: {name} ({_set_description(name, measured)})",
            {"questions": measured["questions"]},
            measured,
        )
    ]


def _commands_by_step(commands: Sequence[str]) -> tuple[list[str], list[str], dict[str, str]]:
    """(conversion commands, training commands, evaluation command per test set) from the commands as run; an
    evaluation's test set is the last folder of its `--output_dir` (WORK_DIR/cells/<cell>/eval/<set>)."""
    convert, train, evaluate = [], [], {}
    for command in commands:
        words = shlex.split(command)
        if any(word.endswith("convert_roberta_to_blockbert.py") for word in words):
            convert.append(command)
        elif "--do_train" in words:
            train.append(command)
        elif "--do_eval" in words and "--output_dir" in words:
            evaluate[Path(words[words.index("--output_dir") + 1]).name] = command
    return convert, train, evaluate


def _machine(results: Mapping) -> str:
    """The hardware the cell trained (and was evaluated) on, from its recorded machines; else the CPU threads."""
    recorded = hardware_text(results["train"].get("machines") or [])
    return recorded or f"a CPU with {results['recipe']['threads']} thread(s)"


def _epochs(results: Mapping) -> str:
    epochs = results["recipe"]["num_train_epochs"]
    return f"{epochs:g} epoch" + ("" if epochs == 1 else "s")


def _training_data(cell: Mapping) -> str:
    training_set = cell.get("train_set") or f"train_{cell['max_seq_length']}"
    first_half = "the first half of SQuAD v1.1 dev (article-disjoint from every test set)"
    if training_set == "paragraphs":
        return f"{first_half} with each question's paragraph as it is"
    if training_set == "train_article":
        rate = cell.get("negative_window_rate")
        negatives = f" at rate {rate:g}" if rate is not None else ""
        return (
            f"{first_half}, each question with its whole article as context: every window of N tokens that holds the "
            f"answer, and windows without it{negatives}, labelled null (`{training_set}`)"
        )
    return (
        f"{first_half}, each context filled with neighbouring paragraphs of its article to "
        f"{cell['max_seq_length']:,} tokens (`{training_set}`)"
    )


def _training_text(results: Mapping, results_path: str) -> str:
    cell, recipe, train = results["cell"], results["recipe"], results["train"]
    data = _training_data(cell)
    rows = [
        ["training data", data],
        ["epochs", f"{recipe['num_train_epochs']:g}"],
        [
            "learning rate",
            f"{recipe['learning_rate']:g}, {recipe['schedule']} schedule, warmup {recipe['warmup_ratio']:g}",
        ],
        [
            "batch",
            f"{recipe['effective_batch_size']} windows ({recipe['per_device_train_batch_size']} x "
            f"{recipe['gradient_accumulation_steps']} gradient accumulation)",
        ],
        ["windows", f"N tokens, doc_stride {recipe['doc_stride']}"],
        ["attention dropout", recipe.get("attention_probs_dropout_prob", "-")],
        ["seed", cell["seed"]],
        ["machine", _machine(results)],
        [
            "train time",
            f"{train['seconds'] / 60:.1f} min in {train['attempts']} attempt(s)"
            + (f", {train['interrupted_attempts']} interrupted" if train.get("interrupted_attempts") else ""),
        ],
    ]
    if train.get("peak_rss_mb"):
        rows.append(["training peak memory (RSS)", f"{train['peak_rss_mb'] / 1024:.2f} GB"])
    if recipe.get("max_train_samples") is not None:
        rows.append(["**subset**", f"only the first {recipe['max_train_samples']} training questions"])
    return f"Values from `{results_path}`.\n\n" + _table(["", ""], rows)


def _results_text(results: Mapping, results_path: str, evaluations: Mapping[str, str]) -> str:
    rows = []
    for name, measured in results["sets"].items():
        seconds = measured.get("seconds_per_question")
        memory = measured.get("peak_rss_mb")
        rows.append(
            [
                f"`{name}`",
                _set_description(name, measured),
                measured["questions"],
                f"{measured['exact_match']:.2f}",
                f"{measured['f1']:.2f}",
                "-" if seconds is None else f"{seconds:.3f}",
                "-" if not memory else f"{memory / 1024:.2f}",
            ]
        )
    text = (
        f"Measured by `experiments/qa_comparison.py` (cell `{results['cell']['name']}`: {results['label']}); the "
        f"values are copied from `{results_path}`. Test questions come from the second half of SQuAD v1.1 dev, whose "
        "articles the model never saw in training; `sweep_<T>` sets hold the same questions at every T. Eval time is "
        f"the forward pass per question on {_machine(results)}; memory is the evaluating process's peak RSS.\n\n"
        + _table(["test set", "context", "questions", "EM", "F1", "eval s / question", "peak memory (GB)"], rows)
    )
    not_measured = [name for name in evaluations if name not in results["sets"]]
    if not_measured:
        text += f"\nNot measured: {', '.join(f'`{name}`' for name in not_measured)}.\n"
    if results["recipe"].get("max_eval_samples") is not None:
        text += f"\n**Subset:** only the first {results['recipe']['max_eval_samples']} questions of each set.\n"
    return text


def _interval(value: Mapping) -> str:
    text = f"{value['difference']:+.1f} [{value['low']:+.1f}, {value['high']:+.1f}]"
    return f"**{text}**" if value.get("excludes_zero") else text


def _comparison_text(report_path: Path, cell: str) -> str:
    """This cell's differences to the comparison's baseline and to full attention at its N, the same comparison at
    the other seeds and the seed spread of its configuration, from the comparison's report (`results.json` beside the
    cells' folders); empty when there is none yet."""
    if not report_path.is_file():
        return ""
    report = json.loads(report_path.read_text(encoding="utf-8"))
    recorded = recorded_path(report_path)
    baseline_note = ""
    if cell == report.get("baseline"):
        baseline_note = (
            f"This model is the comparison's baseline: the other models' differences to it are in `{recorded}`.\n\n"
        )
    tables = [
        (f"Difference to the baseline `{report.get('baseline')}`", report.get("differences_to_baseline", {}), cell)
    ]
    # At an N other than the baseline's: the full-attention cell with the same windows, which isolates the blocks.
    full_at_same_n = dict(equal_window_pairs(report.get("cells", {}))).get(cell)
    if full_at_same_n:
        tables.append(
            (
                f"Difference to full attention at the same N (`{full_at_same_n}`: same windows, seed and training "
                "data, no blocks)",
                report.get("differences_at_the_same_window", {}),
                cell,
            )
        )
    # Above N = 512: full attention over sliding windows of 512, trained on the same data with the same seed.
    sliding = dict(sliding_window_pairs(report.get("cells", {}))).get(cell)
    if sliding:
        tables.append(
            (
                f"Difference to sliding windows of 512 (`{sliding}`: full attention at N = 512, trained on the same "
                "data with the same seed)",
                report.get("differences_to_sliding_windows", {}),
                cell,
            )
        )
    # The same configuration at other seeds: how far the comparison moves when only the fine-tuning seed changes.
    for other in _same_configuration(report.get("cells", {}), cell):
        seed = report["cells"][other]["cell"]["seed"]
        tables += [
            (
                f"The same comparison at seed {seed} (`{other}` against its seed's baseline configuration)",
                report.get("differences_at_the_same_seed", {}),
                other,
            ),
            (f"Seed spread (`{other}` minus the first seed)", report.get("seed_spread", {}), other),
        ]
    text = ""
    for title, compared, name in tables:
        if name not in compared:
            continue
        rows = [
            [f"`{test_set}`", _interval(entry["f1"]), _interval(entry["exact_match"]), entry["f1"]["articles"]]
            for test_set, entry in compared[name].items()
        ]
        text += f"\n{title}:\n\n" + _table(["test set", "F1", "EM", "articles"], rows)
    whole = report.get("whole_articles", {}).get(cell)
    if whole:
        rows = [
            [f"`{rule}`", f"{value['f1']:.1f}", f"{value['paragraph_f1']:.1f}", f"{value['ratio']:.2f}"]
            for rule, value in whole["by_window_scoring"].items()
        ]
        text += (
            "\nWhole articles against the same questions' own paragraphs, by window scoring rule (`null_relative` "
            f"minus `raw`: {_interval(whole['null_relative_minus_raw'])} F1):\n\n"
            + _table(["window scoring", "whole-article F1", "own-paragraph F1", "ratio"], rows)
        )
    if not text:
        return baseline_note
    return baseline_note + (
        f"Differences in points on the same questions with their 95% interval from a paired bootstrap that "
        f"resamples articles, copied from the comparison's report `{recorded}`; bold: the interval excludes zero.\n"
        + text
    )


def _same_configuration(cells: Mapping[str, dict], cell: str) -> list[str]:
    """The cells of the report (this one included) that train `cell`'s configuration, differing at most in the seed."""
    if cell not in cells:
        return []
    key = configuration_key(cells, cell)
    return [name for name in cells if configuration_key(cells, name) == key]


def _named_folders(commands: Sequence[str]) -> list[str]:
    """The `COMMAND_VARIABLES` the commands name, in that order."""
    words = {word for command in commands for word in command.split()}
    return [name for name in COMMAND_VARIABLES if any(word == name or word.startswith(f"{name}/") for word in words)]


def _commands_text(results: Mapping) -> str:
    convert, train, evaluate = _commands_by_step(results["commands"])
    named = _named_folders(results["commands"])
    lines = [MINILM_DEFINITION] if MINILM_VARIABLE in named else []
    lines += ["# convert the starting weights", *convert, "", "# fine-tune", *train]
    for name in results["sets"]:
        if name in evaluate:
            lines += ["", f"# evaluate: {name}", evaluate[name]]
    folders = "; ".join(f"`{name}` is {COMMAND_VARIABLES[name]}" for name in named)
    return (
        "From the repository root, as run"
        + (f" ({folders})" if folders else "")
        + ":\n\n```bash\n"
        + "\n".join(lines)
        + "\n```\n"
    )


def _untrained_positions(results: Mapping, config: BlockBertConfig) -> list[str]:
    """Position rows past the starting weights' sequence length, which only fine-tuning trained."""
    trained = results.get("source_model", {}).get("sequence_length")
    if trained is None or config.max_sequence_length <= trained or getattr(config, "block_relative_positions", False):
        return []  # block-relative positions restart at every block: a block reads the source's own rows
    return [
        f"The starting weights were trained on at most {trained:,} positions: the converter filled position rows "
        f"{trained + 1:,} to {config.max_sequence_length:,} by repeating the trained rows, and the "
        f"{_epochs(results)} of fine-tuning are all the training they had."
    ]


def results_card(
    model_dir: str | os.PathLike,
    results_file: str | os.PathLike,
    name: str,
    *,
    base_model: str | None = None,
    license: str | None = None,
) -> ModelCard:
    """The card of a fine-tuned QA model: its trained folder (`config.json`) and the cell's `results.json`."""
    model_dir, results_path = Path(model_dir), Path(results_file)
    results = read_results(results_path)
    if not results["train"].get("finished"):
        raise ValueError(f"{results_path}: the cell's training has not finished; write its card once it has.")
    if not results["sets"]:
        raise ValueError(f"{results_path}: no test set has been evaluated yet; write the card once one has.")
    config = _read_model_config(model_dir)
    _check_model_matches(config, results["cell"], model_dir, results_path)
    _check_fine_tuned(
        config, model_dir, results_path, "the folder that cell trained (WORK_DIR/cells/<cell>/train/model)"
    )
    base_model, license = _base_model(results, base_model, license)
    recorded = recorded_path(results_path)
    _, _, evaluations = _commands_by_step(results["commands"])
    tags = ["blockbert", "long-context", f"{config.attention_pattern.replace('_', '-')}-attention", "squad"]
    data = _qa_card_data(name, base_model, license, tags, _eval_results(results), recorded)
    heads, block_size = _heads_text(config.heads_per_shift), config.effective_block_size
    attention = (
        f"blockwise attention (n = {config.num_blocks} blocks of b = {block_size} tokens, heads {heads})"
        if config.attention_pattern == "blockwise"
        else ATTENTION_ROLES.get(config.attention_pattern, f"`{config.attention_pattern}` attention")
    )
    limitations = [
        *_config_limitations(config),
        *_untrained_positions(results, config),
        f"Small and specialised: {config.num_hidden_layers} layers, fine-tuned for {_epochs(results)} on about half "
        "of SQuAD v1.1 dev (English Wikipedia, every question answerable). It is a research artefact of a comparison "
        "of attention patterns, not a production QA model.",
        f"Timings and memory were measured on {_machine(results)}, which other cells of the comparison may have "
        "shared: they are upper bounds, not a comparison of models or machines "
        "(`benchmarks/long_document_cost.py` measures what reading long contexts costs).",
    ]
    body = f"""
{_generated_note(f"from {recorded}")}

# {name}

[{base_model}](https://huggingface.co/{base_model}) converted to BlockBERT ("Blockwise Self-Attention for Long
Document Understanding", Qiu et al., Findings of EMNLP 2020) with {attention} at N = {config.max_sequence_length:,},
and fine-tuned for extractive question answering on long contexts built from SQuAD v1.1 dev. Every measured number on
this card was produced by {REPOSITORY}'s own scripts and is copied from `{recorded}` (the comparison with the
baseline from the comparison's report beside it); the commands that produced them are below.

## Model

{_table(["", ""], _model_rows(config, base_model))}
## How to use

{_qa_usage(name)}
## Results

{_results_text(results, recorded, evaluations)}
{_comparison_text(results_path.parent.parent / "results.json", results["cell"]["name"])}
## Training

{_training_text(results, recorded)}
## Commands

{_commands_text(results)}
## Intended use

Extractive question answering over English contexts longer than one window of a full-attention model, and research
on what blockwise attention changes (compare it with the other models of the same comparison: same starting weights,
same recipe).

## Limitations

{_bullets(limitations)}

## Citation

{CITATION}"""
    return _card(data, body)
