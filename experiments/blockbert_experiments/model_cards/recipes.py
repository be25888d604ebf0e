"""Recipe cards of the paper's configurations, for which no weights are published: how to make each with this
repository from roberta-base, how to load it, what it is for and where it falls short."""

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from huggingface_hub import ModelCard, ModelCardData

from .common import CITATION, REPOSITORY, ROBERTA_BASE, _bullets, _card, _generated_note, _limitations


@dataclass(frozen=True)
class PaperConfiguration:
    """A configuration of the paper at RoBERTa-base size: N, n and heads per shift in the paper's notation."""

    name: str
    max_seq_length: int
    num_blocks: int
    heads_per_shift: str
    comparison_cell: str  # the cell of the QA comparison closest to it (all-MiniLM-L6-v2, no continued pre-training)

    @property
    def block_size(self) -> int:
        return math.ceil(self.max_seq_length / self.num_blocks)

    @property
    def heads(self) -> list[int]:
        return [int(count) for count in self.heads_per_shift.split(":")]

    @property
    def sequences_per_batch(self) -> int:
        return PAPER_TOKENS_PER_BATCH // self.max_seq_length


PAPER_TOKENS_PER_BATCH = 131_072
PAPER_LEARNING_RATE = "2.5e-4"  # written as the paper and the README write it
RECIPE_STEPS = 100_000  # not the paper's: a budget to adjust
PAPER_CONFIGURATIONS = {
    c.name: c
    for c in (
        PaperConfiguration("blockbert-base-n2", 512, 2, "10:2", "n512_n2_10-2_seed0"),
        PaperConfiguration("blockbert-base-n2-1024", 1024, 2, "9:3", "n1024_n2_10-2"),
        PaperConfiguration("blockbert-base-n3", 512, 3, "8:2:2", "n512_n3_8-2-2_seed0"),
    )
}


# The QA comparison's report (experiments/qa_comparison.py), relative to the repository root.
COMPARISON_REPORT = Path("results/qa_comparison/results.json")


def read_comparison_report(repository_root: str | Path = ".") -> dict | None:
    """The QA comparison's report, or None where the repository has none."""
    path = Path(repository_root) / COMPARISON_REPORT
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def _interval(value: Mapping) -> str:
    return f"{value['difference']:+.1f} F1 (95% interval {value['low']:+.1f} to {value['high']:+.1f})"


def measured_without_pretraining(configuration: PaperConfiguration, report: Mapping | None) -> str:
    """What the QA comparison measured for the nearest configuration when step 2 is skipped: a small full-attention
    encoder converted and only fine-tuned. Empty where the report has no such measurement."""
    if not report or configuration.comparison_cell not in report.get("cells", {}):
        return ""
    cell = configuration.comparison_cell
    label = report["cells"][cell]["label"]
    verdict = report.get("seed_averaged_verdicts", {}).get(cell, {})
    sliding = report.get("differences_to_sliding_windows", {}).get(cell, {})
    if "article" in sliding:  # a long configuration: against what it should beat, windows of 512
        found = (
            f"against full attention over sliding windows of 512 tokens, from the same weights and data, it scored "
            f"{_interval(sliding['article']['f1'])} over whole articles"
        )
        if "sweep_1024" in sliding:
            found += f" and {_interval(sliding['sweep_1024']['f1'])} over contexts of 1,024 tokens"
    elif "window_512" in verdict:
        entry = verdict["window_512"]
        seeds = " and ".join(str(seed) for seed in entry["seeds"])
        found = (
            f"against full attention from the same weights, averaged over seed{'s' if len(entry['seeds']) > 1 else ''}"
            f" {seeds}, it scored {_interval(entry['f1'])} over contexts filled to 512 tokens"
        )
        if "paragraph" in verdict:
            found += f" and {_interval(verdict['paragraph']['f1'])} over single paragraphs"
    else:
        return ""
    return f"""
## Measured by this project without step 2 (a smaller encoder)

What skipping the continued pre-training costs, measured at a smaller scale: this project converted all-MiniLM-L6-v2 (6
layers, hidden 384, pre-trained with full attention) to the nearest layout, `{cell}` ({label}), and fine-tuned it for
question answering on half of SQuAD v1.1 dev: {found}. Details, commands and the other configurations:
`{COMPARISON_REPORT.parent.as_posix()}/README.md`.
"""


def recipe_commands(configuration: PaperConfiguration) -> str:
    """The shell commands that make `configuration` from roberta-base with this repository."""
    c = configuration
    converted, run = f"outputs/{c.name}-converted", f"outputs/{c.name}-mlm"
    per_device = 8
    return f"""```bash
# 1. roberta-base's weights as BlockBERT (needs the Hub, or a downloaded folder in place of the id);
#    the converter checks that n = 1 reproduces roberta-base and writes nothing if it does not
python examples/convert_roberta_to_blockbert.py {ROBERTA_BASE} {converted} \\
    --num_blocks {c.num_blocks} --heads_per_shift {c.heads_per_shift} --max_seq_length {c.max_seq_length}

# 2. continued masked-LM pre-training on your corpus (.txt / .txt.gz / .jsonl documents)
accelerate launch examples/run_mlm.py --model_name_or_path {converted} --output_dir {run} \\
    --train_files corpus/*.txt.gz --validation_files corpus-held-out.txt.gz \\
    --max_seq_length {c.max_seq_length} --num_blocks {c.num_blocks} --heads_per_shift {c.heads_per_shift} \\
    --tokens_per_batch {PAPER_TOKENS_PER_BATCH} --per_device_train_batch_size {per_device} \\
    --learning_rate {PAPER_LEARNING_RATE} --warmup_ratio 0.06 --max_train_steps {RECIPE_STEPS} \\
    --eval_steps 1000 --checkpointing_steps 1000
# interrupted? the same command with --resume continues exactly where the last checkpoint left off

# 3. the model: {run}/final_model (weights, config, tokenizer and the code for trust_remote_code)
python examples/evaluate_mlm.py {run}/final_model --validation_files corpus-held-out.txt.gz
```
"""


def recipe_card(configuration: PaperConfiguration, comparison_report: Mapping | None = None) -> ModelCard:
    """The card of one of the paper's configurations, for which no weights are published: how to make it from
    roberta-base with this repository, how to load it, its intended use and limitations, and (given the QA
    comparison's report) what skipping its continued pre-training cost a smaller encoder."""
    c = configuration
    shifted = sum(c.heads[1:])
    data = ModelCardData(
        model_name=c.name,
        base_model=ROBERTA_BASE,
        license="mit",  # roberta-base's license: weights made by this recipe derive from it
        language="en",
        library_name="transformers",
        pipeline_tag="fill-mask",
        tags=["blockbert", "long-context", "blockwise-attention", "recipe", "no-weights-published"],
    )
    limitations = _limitations(c.block_size, c.num_blocks, c.heads, c.max_seq_length)
    if c.max_seq_length > 512:
        limitations.insert(
            0,
            f"roberta-base was trained on at most 512 tokens: the converter fills position rows 513 to "
            f"{c.max_seq_length:,} by repeating the trained rows, and only continued pre-training teaches the model "
            "where those positions are.",
        )
    limitations += [
        f"Converted but not yet pre-trained, the model is not usable: its {shifted} shifted heads per layer attend "
        "other tokens than roberta-base's heads were trained on (docs/conversion.md shows by how much the outputs "
        "move). Step 2 is what makes it a BlockBERT.",
        "The recipe starts from roberta-base's weights and uses the paper's pre-training hyper-parameters; it has "
        "not been run to the end by this project, so no quality is claimed for its result.",
    ]
    body = f"""
{_generated_note("from its recipe")}

# {c.name} (recipe, no weights published)

> **No weights published.** This card describes how to make `{c.name}` with {REPOSITORY}; no checkpoint of this name
> has been trained or uploaded by this project, and nothing on this card was measured on such a checkpoint.

BlockBERT ("Blockwise Self-Attention for Long Document Understanding", Qiu et al., Findings of EMNLP 2020) is RoBERTa
with blockwise self-attention: each head splits the sequence into n blocks and lets query block i attend only key
block (i + s) mod n, s being the head's shift. Attention memory and FLOPs drop by n. This is the paper's configuration
with N = {c.max_seq_length:,} tokens, n = {c.num_blocks} blocks of b = {c.block_size} tokens and heads per shift
{c.heads_per_shift} ({c.heads[0]} heads attend their own block, {shifted} attend another block), at RoBERTa-base size
(12 layers, hidden 768, 12 heads).

## How to make it

From the repository root of {REPOSITORY}:

{recipe_commands(c)}
Pre-training hyper-parameters (the paper's, as `examples/run_mlm.py` uses them by default): {PAPER_TOKENS_PER_BATCH:,}
tokens per batch ({c.sequences_per_batch} sequences of {c.max_seq_length:,}, split into processes x
`--per_device_train_batch_size` x gradient accumulation), AdamW (0.9, 0.999, eps 1e-8), weight decay 0.01, peak
learning rate {PAPER_LEARNING_RATE} with linear warmup and decay, gradient clipping 1.0. Not from the paper: the
warmup share (the paper gives none; 0.06 here), the number of steps ({RECIPE_STEPS:,} here, about
{RECIPE_STEPS * PAPER_TOKENS_PER_BATCH / 1e9:.1f} B tokens: set it to your budget) and the corpus. Details:
`docs/pretraining.md` and `docs/conversion.md`.

## How to load it

```python
from transformers import AutoModel, AutoModelForMaskedLM, AutoTokenizer

model = AutoModel.from_pretrained("path/to/{c.name}", trust_remote_code=True)  # the final_model folder
mlm = AutoModelForMaskedLM.from_pretrained("path/to/{c.name}", trust_remote_code=True)
tokenizer = AutoTokenizer.from_pretrained("path/to/{c.name}", trust_remote_code=True)
```

With `blockbert_hf` installed, `import blockbert_hf` registers the classes and `trust_remote_code` is not needed.

## Intended use

An encoder to fine-tune for tasks on long English documents (extractive question answering, classification, token
classification) where full attention at N = {c.max_seq_length:,} costs too much memory or time; `examples/run_qa.py`
fine-tunes it for QA and the folder carries a QA pipeline that reads contexts of any length in windows of N tokens.
Also a baseline for research on sparse attention patterns.

## Limitations

{_bullets(limitations)}

The attention rules behind these points: `docs/attention.md`.
{measured_without_pretraining(c, comparison_report)}
## From the paper (not measured by this project)

The paper's abstract reports that BlockBERT uses 18.7-36.1% less memory and 12.0-25.1% less time to train than RoBERTa,
and saves 27.8% inference time, with comparable and sometimes better prediction accuracy.

## Citation

{CITATION}"""
    return _card(data, body)
