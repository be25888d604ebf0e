"""Extractive question answering: data (`data`), window features (`features`), post-processing and SQuAD metrics
(`postprocessing`), the per-block training objective (`objective`), and the fine-tuning/evaluation run that
`examples/run_qa.py` wires to its command line (`finetuning`: its options in `arguments`, the model and windows in
`preparation`, the loop in `training`, evaluation in `evaluation`).
`python -m blockbert_hf.train.qa split-articles SRC OUT_DIR` splits a SQuAD file into two halves."""

from .. import TRAIN_EXTRA, require_extra


require_extra("blockbert_hf.train.qa", "train", TRAIN_EXTRA)

from .arguments import LEARNING_RATE_GRID, QARunConfig, default_window_layout  # noqa: E402
from .data import (  # noqa: E402
    HUB_DATASETS,
    QA_COLUMNS,
    QA_FEATURES,
    check_qa_dataset,
    has_impossible_questions,
    load_qa_dataset,
    mrqa_row,
    read_mrqa_jsonl,
    read_squad_json,
    realign_answers,
    split_squad_articles,
)
from .features import EVAL_METADATA_COLUMNS, check_question_lengths, prepare_eval_features, prepare_train_features  # noqa: E402
from .finetuning import run_qa  # noqa: E402
from .objective import QA_OBJECTIVES, per_block_span_loss  # noqa: E402
from .postprocessing import (  # noqa: E402
    SquadMetric,
    load_squad_metric,
    normalize_answer,
    postprocess_qa_predictions,
    squad_references,
)
from .preparation import resolve_window_lengths  # noqa: E402


__all__ = [
    "EVAL_METADATA_COLUMNS",
    "HUB_DATASETS",
    "LEARNING_RATE_GRID",
    "QA_OBJECTIVES",
    "QA_COLUMNS",
    "QA_FEATURES",
    "QARunConfig",
    "SquadMetric",
    "check_qa_dataset",
    "check_question_lengths",
    "default_window_layout",
    "has_impossible_questions",
    "load_qa_dataset",
    "load_squad_metric",
    "mrqa_row",
    "normalize_answer",
    "per_block_span_loss",
    "postprocess_qa_predictions",
    "prepare_eval_features",
    "prepare_train_features",
    "read_mrqa_jsonl",
    "read_squad_json",
    "realign_answers",
    "resolve_window_lengths",
    "run_qa",
    "split_squad_articles",
    "squad_references",
]
