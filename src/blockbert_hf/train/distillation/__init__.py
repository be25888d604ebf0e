"""Self-distillation of a converted checkpoint into its blockwise self (`examples/distill_blockbert.py`).

A RoBERTa or BERT checkpoint converted to BlockBERT (n > 1) computes blockwise attention with weights trained for full
attention. Distillation trains it to reproduce, layer by layer, what the same weights compute with full attention (the
teacher, frozen): no MLM head is needed, so it suits sentence encoders such as all-MiniLM-L6-v2.

1. **The objective** (`objective`): each layer's normalised MSE and the last layer's cosine distance over real tokens;
   for inputs longer than the teacher's N, the teacher's sliding windows (each token from its most central window).
2. **The run** (`trainer`): `run_distillation(DistillationArguments)` (options in `arguments`), with the run folder,
   checkpoints, exact resume, the metrics log and the guards of `blockbert_hf.train.runs`; documents and packing as in
   `blockbert_hf.train.pretraining`.

A run folder holds `run_args.json`, `checkpoints/step_K`, `metrics.jsonl` (held-out losses per layer), and once
finished `distilled_model/` (the student, its tokenizer and model card) and `results.json`.
"""

from .. import TRAIN_EXTRA, require_extra


require_extra("blockbert_hf.train.distillation", "train", TRAIN_EXTRA)

from .arguments import DISTILLED_MODEL_DIR, RESULTS_FILE, DistillationArguments  # noqa: E402
from .objective import (  # noqa: E402
    combined_loss,
    cosine_distance,
    layer_losses,
    most_central_window,
    normalised_mse,
    parse_layer_weights,
    sliding_window_hidden_states,
    window_starts,
)
from .trainer import evaluate, load_teacher_and_student, run_distillation  # noqa: E402


__all__ = [
    "DISTILLED_MODEL_DIR",
    "RESULTS_FILE",
    "DistillationArguments",
    "combined_loss",
    "cosine_distance",
    "evaluate",
    "layer_losses",
    "load_teacher_and_student",
    "most_central_window",
    "normalised_mse",
    "parse_layer_weights",
    "run_distillation",
    "sliding_window_hidden_states",
    "window_starts",
]
