"""Hub model cards (`README.md` with YAML metadata) written from what the repository measured, never by hand.

Three kinds of card, one module each:

- `results_card` (`comparison`): a model fine-tuned by the long-context QA comparison (`experiments/qa_comparison.py`),
  every number read from the cell's `results.json`.
- `demo_card` (`demo`): the model `make demo` (`experiments/demo.py`) fine-tunes, every number read from the demo's
  results file.
- `recipe_card` (`recipes`): one of the paper's configurations (`PAPER_CONFIGURATIONS`) for which no weights are
  published: how to make it with this repository from roberta-base, how to load it, what it is for and where it falls
  short.

A measured card records the path of its results file (`results_file` in its metadata) so that it can be checked against
it. The YAML is written by `huggingface_hub.ModelCardData` (with `EvalResult` for the measured results) and the card is
parsed back by `huggingface_hub.ModelCard` before it is written (`common`), so a card that the Hub could not read is
never saved. `experiments/write_model_card.py` is the command line.
"""

from .common import CITATION, KNOWN_BASE_MODELS, METRICS, REPOSITORY, ROBERTA_BASE, SQUAD, write_card
from .comparison import ATTENTION_ROLES, read_results, results_card
from .demo import DEMO_RESULTS_KEYS, demo_card, read_demo_results
from .recipes import (
    PAPER_CONFIGURATIONS,
    PAPER_LEARNING_RATE,
    PAPER_TOKENS_PER_BATCH,
    RECIPE_STEPS,
    PaperConfiguration,
    read_comparison_report,
    recipe_card,
    recipe_commands,
)


__all__ = [
    "ATTENTION_ROLES",
    "CITATION",
    "DEMO_RESULTS_KEYS",
    "KNOWN_BASE_MODELS",
    "METRICS",
    "PAPER_CONFIGURATIONS",
    "PAPER_LEARNING_RATE",
    "PAPER_TOKENS_PER_BATCH",
    "RECIPE_STEPS",
    "REPOSITORY",
    "ROBERTA_BASE",
    "SQUAD",
    "PaperConfiguration",
    "demo_card",
    "read_demo_results",
    "read_results",
    "read_comparison_report",
    "recipe_card",
    "recipe_commands",
    "results_card",
    "write_card",
]
