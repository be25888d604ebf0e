"""The card of the model `make demo` (`experiments/demo.py`) fine-tunes: all-MiniLM-L6-v2 converted to BlockBERT at a
long N, fine-tuned briefly on bundled SQuAD articles and evaluated on a held-out long article.

Every number on it, the `model-index` of EM/F1 on the held-out questions included, is read from the demo's results
file, whose path the card records (`results_file` in its metadata).
"""

import os
from collections.abc import Mapping
from pathlib import Path

from huggingface_hub import EvalResult, ModelCard

from blockbert_benchmarks.measuring.machine import recorded_path
from blockbert_hf.configuration_blockbert import BlockBertConfig, parse_heads_per_shift

from ..minilm import MINILM_DEFINITION, MINILM_VARIABLE
from ..qa_comparison.layout import missing_keys
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


DEMO_KIND = "blockbert-hf demo"
HELD_OUT_SETS = ("own_paragraph", "whole_document")
FULL_ATTENTION = "full"  # the key of the full-attention model in `efficiency.models`, which the ratios divide by
RATIOS_TO_FULL = ("time_ratio_to_full", "memory_ratio_to_full")

_SET_KEYS = dict.fromkeys(("questions", "exact_match", "f1", "seconds_per_question"))
_EFFICIENCY_MODEL_KEYS = dict.fromkeys(("label", "median_s", "peak_bytes"))
# The keys the card reads, nested as in the results file (None: a value).
DEMO_RESULTS_KEYS = {
    "kind": None,
    "command": None,
    "elapsed_seconds": None,
    "machine": None,
    "source_model": dict.fromkeys(("path", "sha256")),
    "conversion": dict.fromkeys(("command", "verified", "max_abs_difference_n1")),
    "model": dict.fromkeys(("max_seq_length", "num_blocks", "heads_per_shift")),
    "training": dict.fromkeys(
        (
            "data_file",
            "articles",
            "questions",
            "max_seq_length",
            "doc_stride",
            "num_train_epochs",
            "learning_rate",
            "batch_size",
            "warmup_ratio",
            "seed",
            "seconds",
            "final_loss",
        )
    ),
    "held_out": {"title": None, "document_tokens": None, **dict.fromkeys(HELD_OUT_SETS, _SET_KEYS)},
    "efficiency": dict.fromkeys(("what", "tokens", "rounds", "threads", "kernels")),
}
# The keys of each kernel's entry in `efficiency.kernels`.
_KERNEL_KEYS = {"models": {FULL_ATTENTION: _EFFICIENCY_MODEL_KEYS}, **dict.fromkeys(RATIOS_TO_FULL)}


def read_demo_results(path: str | os.PathLike) -> dict:
    """The results file `experiments/demo.py` writes, with an error naming every key the card needs that it lacks."""
    path = Path(path)
    results = _read_results_json(path, "`make demo`")
    missing = missing_keys(results, DEMO_RESULTS_KEYS)
    kernels = results.get("efficiency", {}).get("kernels") if isinstance(results.get("efficiency"), Mapping) else None
    if isinstance(kernels, Mapping):
        for kernel, measured in kernels.items():
            prefix = f"efficiency.kernels.{kernel}."
            missing += missing_keys(measured, _KERNEL_KEYS, prefix)
            if not isinstance(measured, Mapping) or not isinstance(measured.get("models"), Mapping):
                continue
            # every BlockBERT row, not only full attention's, needs its values and its ratios to full attention
            for key, model in measured["models"].items():
                if key == FULL_ATTENTION:
                    continue
                missing += missing_keys(model, _EFFICIENCY_MODEL_KEYS, f"{prefix}models.{key}.")
                missing += [
                    f"{prefix}{ratio}.{key}"
                    for ratio in RATIOS_TO_FULL
                    if isinstance(measured.get(ratio), Mapping) and key not in measured[ratio]
                ]
    if missing:
        raise ValueError(
            f"{path} is not a complete results file of experiments/demo.py: it has no {', '.join(missing)}."
        )
    if results["kind"] != DEMO_KIND:
        raise ValueError(f"{path} holds {results['kind']!r} results, not {DEMO_KIND!r} ones: pass the demo's file.")
    return results


def _check_model_matches(config: BlockBertConfig, model: Mapping, model_dir: Path, results_file: Path) -> None:
    """The model folder must hold the configuration the demo measured."""
    expected = {
        "attention_pattern": "blockwise",
        "N": model["max_seq_length"],
        "num_blocks": model["num_blocks"],
        "heads_per_shift": _heads_text(parse_heads_per_shift(model["heads_per_shift"])),
    }
    found = {
        "attention_pattern": config.attention_pattern,
        "N": config.max_sequence_length,
        "num_blocks": config.num_blocks,
        "heads_per_shift": _heads_text(config.heads_per_shift),
    }
    differing = _differences(expected, found)
    if differing:
        raise ValueError(
            f"{model_dir} is not the model of {results_file}: {', '.join(differing)}. Pass the folder the demo "
            "fine-tuned (`model.folder` in the results file)."
        )


def _set_description(name: str, held_out: Mapping) -> str:
    if name == "own_paragraph":
        return "each question's own paragraph"
    return f"the whole article, {held_out['document_tokens']:,} tokens"


def _eval_results(held_out: Mapping) -> list[EvalResult]:
    return [
        entry
        for name in HELD_OUT_SETS
        for entry in _squad_eval_results(
            name,
            f"SQuAD v1.1 dev, held-out article {held_out['title']}: {name} ({_set_description(name, held_out)})",
            {"questions": held_out[name]["questions"], "article": held_out["title"]},
            held_out[name],
        )
    ]


def _results_text(results: Mapping) -> str:
    held_out = results["held_out"]
    rows = [
        [
            f"`{name}`",
            _set_description(name, held_out),
            held_out[name]["questions"],
            f"{held_out[name]['exact_match']:.2f}",
            f"{held_out[name]['f1']:.2f}",
            f"{held_out[name]['seconds_per_question']:.3f}",
        ]
        for name in HELD_OUT_SETS
    ]
    return (
        f"Questions about `{held_out['title']}`, an article the model never saw in fine-tuning, answered through the "
        f"pipeline above; seconds per question as measured on {results['machine']}.\n\n"
        + _table(["held-out set", "context", "questions", "EM", "F1", "s / question"], rows)
    )


def _ratio(ratios: Mapping, key: str) -> str:
    return "-" if key == FULL_ATTENTION else f"{ratios[key]:.2f}"


def _efficiency_text(results: Mapping) -> str:
    efficiency = results["efficiency"]
    rows = [
        [
            f"`{kernel}`",
            model["label"],
            f"{model['median_s']:.3f}",
            f"{model['peak_bytes'] / 2**20:,.1f}",
            _ratio(measured["time_ratio_to_full"], key),
            _ratio(measured["memory_ratio_to_full"], key),
        ]
        for kernel, measured in efficiency["kernels"].items()
        for key, model in measured["models"].items()
    ]
    return (
        f"The same weights on the same document with full attention and with BlockBERT: {efficiency['what']}, "
        f"{efficiency['tokens']:,} tokens, on {results['machine']} with {efficiency['threads']} thread(s): the median "
        f"time over {efficiency['rounds']} interleaved rounds and the peak memory of the forward's tensors; the ratios "
        "divide by full attention's with the same kernel (below 1: cheaper than full attention). `eager` materialises "
        "the attention scores, `sdpa` is PyTorch's fused kernel (the default). They compare attention patterns on one "
        "machine, not machines.\n\n"
        + _table(["kernel", "model", "time (s)", "peak memory (MiB)", "time / full", "memory / full"], rows)
    )


def _negative_windows_text(rate: float | None) -> str:
    if rate is None or rate >= 1:
        return "all kept, labelled null"
    return f"kept at rate {rate:g} (seeded), labelled null"


def _questions_text(training: Mapping) -> str:
    """The training questions: over their whole article, and (demos since the paragraph option) over paragraphs."""
    text = f"{training['questions']:,} over their whole article"
    if training.get("paragraph_questions"):
        text += f", {training['paragraph_questions']:,} over their own paragraph"
    if training.get("paragraph_negatives"):
        text += f" ({training['paragraph_negatives']:,} of them also over another paragraph, without answer)"
    return text


def _training_questions(training: Mapping) -> int:
    return training["questions"] + (training.get("paragraph_questions") or 0)


def _training_text(results: Mapping) -> str:
    training = results["training"]
    rows = [
        ["data", f"`{training['data_file']}`: {', '.join(f'`{title}`' for title in training['articles'])}"],
        ["questions", _questions_text(training)],
        ["windows", f"{training['max_seq_length']} tokens, doc_stride {training['doc_stride']}"],
        ["window layout", f"`{training.get('window_layout') or 'question_first'}`"],
        ["windows without the answer", _negative_windows_text(training.get("negative_window_rate"))],
        ["epochs", f"{training['num_train_epochs']:g}"],
        ["learning rate", f"{training['learning_rate']:g}, warmup {training['warmup_ratio']:g}"],
        ["batch size", training["batch_size"]],
        ["seed", training["seed"]],
        ["train time", f"{training['seconds'] / 60:.1f} min on {results['machine']}"],
        # None where the run ended before its first logged step
        ["final training loss", "not logged" if training["final_loss"] is None else f"{training['final_loss']:.3f}"],
    ]
    return _table(["", ""], rows)


def _variable_definitions(command: str) -> list[str]:
    """The shell line that sets `$MINILM` (the installed all-MiniLM-L6-v2), where the recorded command names it."""
    return [MINILM_DEFINITION] if MINILM_VARIABLE in command.split() else []


def _commands_text(results: Mapping) -> str:
    lines = [
        "# the demo: convert, fine-tune, evaluate, measure, write this card",
        results["command"],
        "",
        f"# its conversion step, from {results['source_model']['path']}",
        *_variable_definitions(results["conversion"]["command"]),
        results["conversion"]["command"],
    ]
    if results["training"].get("command"):
        lines += ["", "# its fine-tuning step", results["training"]["command"]]
    return (
        f"From the repository root, as run (the whole demo took {results['elapsed_seconds'] / 60:.1f} min on "
        f"{results['machine']}):\n\n```bash\n" + "\n".join(lines) + "\n```\n"
    )


def _conversion_check_text(conversion: Mapping) -> str:
    if not conversion["verified"]:
        return "The conversion was not verified."
    return (
        f"The conversion checked that with n = 1 it computes what the source model computes (largest difference "
        f"{conversion['max_abs_difference_n1']:.1e})."
    )


def _demo_limitations(config: BlockBertConfig, results: Mapping) -> list[str]:
    """The card's limitations: the configuration's, the training window's, and the demo's size and machine."""
    training = results["training"]
    limitations = _config_limitations(config)
    window, block_size = training["max_seq_length"], config.effective_block_size
    if window < config.max_sequence_length and config.block_relative_positions:
        last_block = window - (config.num_blocks - 1) * block_size
        limitations.append(
            f"Fine-tuned on windows of {window} tokens, shorter than N = {config.max_sequence_length:,}: the last "
            f"block held at most {max(last_block, 0)} of its {block_size} tokens in training."
        )
    elif window < config.max_sequence_length:
        limitations.append(
            f"Fine-tuned on windows of {window} tokens, shorter than N = {config.max_sequence_length:,}: "
            f"fine-tuning never saw positions past {window}."
        )
    return limitations + [
        f"Small and briefly trained: {config.num_hidden_layers} layers, {training['num_train_epochs']:g} epoch(s) "
        f"on {_training_questions(training):,} questions from {len(training['articles'])} article(s); the EM/F1 above "
        "come from the questions of one held-out article and are a rough estimate, not a benchmark.",
        f"Timings and memory were measured on {results['machine']}; they compare full and blockwise attention on that "
        "machine, not machines.",
    ]


def demo_card(
    model_dir: str | os.PathLike,
    results_file: str | os.PathLike,
    name: str,
    *,
    base_model: str | None = None,
    license: str | None = None,
) -> ModelCard:
    """The card of the model `make demo` fine-tuned: its folder (`config.json`) and the demo's results file."""
    model_dir, results_path = Path(model_dir), Path(results_file)
    results = read_demo_results(results_path)
    config = _read_model_config(model_dir)
    _check_model_matches(config, results["model"], model_dir, results_path)
    _check_fine_tuned(
        config, model_dir, results_path, "the folder the demo fine-tuned (`model.folder` in the results file)"
    )
    base_model, license = _base_model(results, base_model, license)
    recorded = recorded_path(results_path)
    training, held_out, conversion = results["training"], results["held_out"], results["conversion"]
    tags = ["blockbert", "long-context", "blockwise-attention"]
    data = _qa_card_data(name, base_model, license, tags, _eval_results(held_out), recorded)
    heads, block_size = _heads_text(config.heads_per_shift), config.effective_block_size
    check = _conversion_check_text(conversion)
    demo_statement = (
        f"**Demo model: {training['seconds'] / 60:.1f} minutes of fine-tuning on {_training_questions(training):,} "
        "questions; not a production QA model.**"
    )
    articles = ", ".join(f"`{title}`" for title in training["articles"])
    limitations = _demo_limitations(config, results)
    body = f"""
{_generated_note(f"from {recorded}")}

# {name}

> {demo_statement}
> `make demo` made it to show {REPOSITORY} end to end on a CPU: real pretrained weights converted to BlockBERT,
> fine-tuned, and asked questions about a long held-out document.

[{base_model}](https://huggingface.co/{base_model}) converted to BlockBERT ("Blockwise Self-Attention for Long
Document Understanding", Qiu et al., Findings of EMNLP 2020) at N = {config.max_sequence_length:,} tokens with
n = {config.num_blocks} blocks of b = {block_size} tokens and heads {heads}. {check} It was then fine-tuned
briefly for extractive question answering on the bundled SQuAD v1.1 dev articles {articles} and evaluated on the
held-out article `{held_out["title"]}` ({held_out["document_tokens"]:,} tokens).

Every number on this card is copied from `{recorded}`, which `experiments/demo.py` wrote; the commands are below.

## Model

{_table(["", ""], _model_rows(config, base_model))}
## How to use

{_qa_usage(name)}
## Results

{_results_text(results)}
## Efficiency

{_efficiency_text(results)}
## Training

{_training_text(results)}
## Commands

{_commands_text(results)}
## Intended use

Trying BlockBERT out: loading a converted long-context model through the `transformers` pipeline, answering questions
over a long document, and comparing the cost of full and blockwise attention on one machine. For a useful QA model,
fine-tune on far more data with `examples/run_qa.py`.

## Limitations

{_bullets(limitations)}

## Citation

{CITATION}"""
    return _card(data, body)
