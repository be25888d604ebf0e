"""Masked-language-model pre-training of BlockBERT with Accelerate (`examples/run_mlm.py`).

1. **Documents** (`documents`): local `.txt` / `.txt.gz` / `.jsonl` files or a hub dataset become documents; where a
   document ends is `--document_boundary` (`file`, `blank_line` or `heading`).
2. **Packing and masking** (`data`): DOC-SENTENCES packing (a sequence never mixes two documents) and masks seeded
   per sequence, so 2-process and resumed runs see the masks of a 1-process uninterrupted run; validation masks use
   `VALIDATION_SEED`, the same for every run.
3. **Tokenizer, model, batch geometry** (`model`): `tokens_per_batch = B x N` is split over processes and
   gradient-accumulation micro-batches.
4. **The run** (`trainer`): `run_pretraining(PretrainingArguments)` (options in `arguments`), with checkpoints,
   resume, the metrics log and the guards of `blockbert_hf.train.runs`.
5. **Evaluation** (`evaluation`): validation loss and perplexity over the masked tokens, during a run and of a saved
   model (`evaluate_saved_model`, `examples/evaluate_mlm.py`).

A run folder holds `run_args.json`, `checkpoints/step_K`, `metrics.jsonl` (and TensorBoard logs if installed),
`tokenizer/` (when trained on the fly), and once finished `final_model/` and `results.json`.
"""

from .. import TRAIN_EXTRA, require_extra


require_extra("blockbert_hf.train.pretraining", "train", TRAIN_EXTRA)

from ..runs import list_checkpoints  # noqa: E402
from .arguments import FINAL_MODEL_DIR, RESULTS_FILE, TOKENIZER_DIR, WIKITEXT_HEADING, PretrainingArguments  # noqa: E402
from .data import VALIDATION_SEED, MaskingCollator, masking_seed, pack_documents, tokenize_and_pack  # noqa: E402
from .documents import DOCUMENT_BOUNDARIES, load_training_data, read_documents, split_documents  # noqa: E402
from .evaluation import (  # noqa: E402
    MaskedLMLoss,
    MLMEvaluationArguments,
    UnreliableScoreError,
    evaluate,
    evaluate_saved_model,
    perplexity,
)
from .model import BatchGeometry, batch_geometry, build_model, prepare_tokenizer  # noqa: E402
from .trainer import run_pretraining  # noqa: E402


__all__ = [
    "DOCUMENT_BOUNDARIES",
    "FINAL_MODEL_DIR",
    "RESULTS_FILE",
    "TOKENIZER_DIR",
    "VALIDATION_SEED",
    "WIKITEXT_HEADING",
    "BatchGeometry",
    "MaskedLMLoss",
    "MaskingCollator",
    "MLMEvaluationArguments",
    "PretrainingArguments",
    "UnreliableScoreError",
    "batch_geometry",
    "build_model",
    "evaluate",
    "evaluate_saved_model",
    "list_checkpoints",
    "load_training_data",
    "masking_seed",
    "pack_documents",
    "perplexity",
    "prepare_tokenizer",
    "read_documents",
    "run_pretraining",
    "split_documents",
    "tokenize_and_pack",
]
