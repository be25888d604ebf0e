"""What a QA run reads before it trains or evaluates: the model and tokenizer, the window settings (length, stride,
layout, scoring rule, objective) that the options and the model's recorded defaults decide, and the training and
evaluation examples cut into windows (`_prepare_data`)."""

from dataclasses import dataclass

import datasets
from accelerate import Accelerator
from accelerate.logging import get_logger
from transformers import AutoModelForQuestionAnswering, AutoTokenizer

from ...model.pipeline_question_answering import (
    check_window_scoring,
    model_window_scoring,
    qa_settings,
    resolve_window_layout,
)
from ...model.question_answering_windows import DEFAULT_WINDOW_LAYOUT, default_max_seq_len
from .arguments import QARunConfig, default_window_layout
from .data import has_impossible_questions, load_qa_dataset, realign_answers
from .features import check_question_lengths, prepare_eval_features, prepare_train_features
from .objective import QA_OBJECTIVE_KEY, check_block_null_tokens, resolve_qa_objective


logger = get_logger(__name__)


def _load_model_and_tokenizer(config: QARunConfig):
    tokenizer = AutoTokenizer.from_pretrained(
        config.tokenizer_name or config.model_name_or_path, trust_remote_code=config.trust_remote_code
    )
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError(
            f"{type(tokenizer).__name__} is not a fast tokenizer: windows need its overflow and offset mapping."
        )
    tokenizer.padding_side = "right"  # BlockBERT rejects left padding; offsets assume the question comes first
    model_kwargs = {"trust_remote_code": config.trust_remote_code}
    if config.attn_implementation:
        model_kwargs["attn_implementation"] = config.attn_implementation
    if config.attention_probs_dropout_prob is not None:
        model_kwargs["attention_probs_dropout_prob"] = config.attention_probs_dropout_prob
    model = AutoModelForQuestionAnswering.from_pretrained(config.model_name_or_path, **model_kwargs)
    return model, tokenizer


def resolve_window_lengths(model, tokenizer, max_seq_length: int | None, doc_stride: int) -> tuple[int, int]:
    """The window length (default: the model's N) and stride, checked against what the model takes."""
    model_length = default_max_seq_len(model, tokenizer)
    max_seq_length = max_seq_length or model_length
    if max_seq_length > model_length:
        raise ValueError(
            f"--max_seq_length {max_seq_length} exceeds what the model takes (N = {model_length}); use at most "
            f"{model_length}, or a checkpoint converted to a longer N."
        )
    if not 0 <= doc_stride < max_seq_length:
        raise ValueError(f"--doc_stride must be in [0, max_seq_length = {max_seq_length}), got {doc_stride}.")
    return max_seq_length, doc_stride


def _data_source(config: QARunConfig, file: str | None, option: str) -> str:
    """The option that names a split's data, for messages: `--train_file PATH` or `--dataset_name NAME`."""
    return f"{option} {file}" if file else f"--dataset_name {config.dataset_name}"


def _load_split(config: QARunConfig, file: str | None, split: str, limit: int | None):
    if file:
        dataset = load_qa_dataset(file, split=split)
    else:
        dataset = load_qa_dataset(
            config.dataset_name, split, config_name=config.dataset_config_name, mrqa_subset=config.mrqa_subset
        )
    return dataset if limit is None else dataset.select(range(min(limit, len(dataset))))


@dataclass
class _QAData:
    train_examples: datasets.Dataset | None = None
    train_features: datasets.Dataset | None = None
    eval_examples: datasets.Dataset | None = None
    eval_features: datasets.Dataset | None = None


def _training_examples(config: QARunConfig, feature_kwargs: dict, data: _QAData, summary: dict) -> None:
    examples = _load_split(config, config.train_file, config.train_split, config.max_train_samples)
    examples, alignment = realign_answers(examples)
    logger.info(
        f"Training answers: {alignment['realigned']} re-aligned to their text, {alignment['dropped']} dropped "
        f"(text not in the context), {alignment['removed_questions']} question(s) skipped (no answer left)."
    )
    source = _data_source(config, config.train_file, "--train_file")
    check_question_lengths(examples["id"], examples["question"], name=source, **feature_kwargs)
    data.train_examples = examples
    summary["answer_alignment"] = alignment


def _evaluation_examples(config: QARunConfig, feature_kwargs: dict, data: _QAData) -> None:
    examples = _load_split(config, config.validation_file, config.validation_split, config.max_eval_samples)
    source = _data_source(config, config.validation_file, "--validation_file")
    if config.version_2_with_negative is False and has_impossible_questions(examples):
        raise ValueError(
            f"{source} has questions without an answer (SQuAD 2.0), which cannot be scored as SQuAD 1.1: pass "
            "--version_2_with_negative True, or leave it out (detected from the data)."
        )
    check_question_lengths(examples["id"], examples["question"], name=source, **feature_kwargs)
    data.eval_examples = examples


def _training_data(config: QARunConfig, feature_kwargs: dict, data: _QAData, summary: dict) -> None:
    examples = data.train_examples
    sampling = {"negative_window_rate": config.negative_window_rate, "seed": config.seed}
    data.train_features = examples.map(
        prepare_train_features,
        batched=True,
        remove_columns=examples.column_names,
        fn_kwargs={**feature_kwargs, **sampling},
        num_proc=config.preprocessing_num_workers,
        desc="Training windows",
    )
    negatives = sum(start == 0 for start in data.train_features["start_positions"])  # the null token is CLS, token 0
    summary.update(
        train_examples=len(examples),
        train_features=len(data.train_features),
        train_null_features=negatives,
        negative_window_rate=config.negative_window_rate,
    )


def _evaluation_data(config: QARunConfig, feature_kwargs: dict, data: _QAData, summary: dict) -> None:
    examples = data.eval_examples
    features = examples.map(
        prepare_eval_features,
        batched=True,
        remove_columns=examples.column_names,
        fn_kwargs=feature_kwargs,
        num_proc=config.preprocessing_num_workers,
        desc="Evaluation windows",
    )
    # Longest windows first: batches of similar lengths pad little (predictions are grouped by example_id, so the
    # order of windows does not matter).
    lengths = [len(input_ids) for input_ids in features["input_ids"]]
    data.eval_features = features.select(sorted(range(len(lengths)), key=lambda i: -lengths[i]))
    summary.update(eval_examples=len(examples), eval_features=len(data.eval_features))


def _prepare_data(config: QARunConfig, accelerator: Accelerator, model, tokenizer) -> tuple[_QAData, dict]:
    """The training and evaluation windows, and the run summary so far (with whether the empty answer is allowed)."""
    max_seq_length, doc_stride = resolve_window_lengths(model, tokenizer, config.max_seq_length, config.doc_stride)
    processes = accelerator.num_processes
    logger.info(f"Windows of {max_seq_length} tokens overlapping by {doc_stride}; {processes} process(es).")
    window_scoring = check_window_scoring(config.window_scoring or model_window_scoring(model.config))
    layout_option = config.window_layout or default_window_layout(model.config, max_seq_length)
    window_layout, block_size = resolve_window_layout(model.config, layout_option)
    if block_size is not None:
        logger.info(f"Window layout {window_layout}: blocks of {block_size} tokens, each starting with the question.")
    if layout_option and not config.window_layout:
        logger.info(
            f"--window_layout {window_layout} by default: the model has block-relative positions and windows of "
            f"{max_seq_length} tokens span several blocks (--window_layout question_first for the other layout)."
        )
    qa_objective = resolve_qa_objective(model.config, config.qa_objective, window_layout)
    if qa_objective == "per_block":
        check_block_null_tokens(tokenizer)
        logger.info(f"Objective per_block: a start/end softmax over each block of {block_size} tokens.")
    summary: dict = {
        "model": config.model_name_or_path,
        "max_seq_length": max_seq_length,
        "doc_stride": doc_stride,
        "window_scoring": window_scoring,
        "window_layout": window_layout,
        "qa_objective": qa_objective,
    }
    if block_size is not None:
        summary["window_block_size"] = block_size
    data = _QAData()
    feature_kwargs = {
        "tokenizer": tokenizer,
        "max_seq_length": max_seq_length,
        "doc_stride": doc_stride,
        "layout": window_layout,
        "block_size": block_size,
    }
    with accelerator.main_process_first():
        # Every question is read and checked before any window is cut.
        if config.do_train:
            _training_examples(config, feature_kwargs, data, summary)
        if config.do_eval:
            _evaluation_examples(config, feature_kwargs, data)
        if config.do_train:
            _training_data(config, feature_kwargs, data, summary)
        if config.do_eval:
            _evaluation_data(config, feature_kwargs, data, summary)
    version_2 = config.version_2_with_negative
    if version_2 is None:
        version_2 = any(has_impossible_questions(e) for e in (data.train_examples, data.eval_examples) if e is not None)
    summary["version_2_with_negative"] = version_2
    return data, summary


def _trained_qa_settings(model_config, summary: dict) -> dict:
    """What the fine-tuned model records (`config.question_answering`), its pipeline's defaults: the window scoring
    rule it is trained for and, unless it is the default `question_first`, the window layout it is trained on with
    its block size (left out for `question_first`, so such a model's config is what it always was); and the
    objective it was fine-tuned with (`qa_objective`), which a run continuing from it takes by default."""
    settings = {**qa_settings(model_config), "window_scoring": summary["window_scoring"]}
    settings[QA_OBJECTIVE_KEY] = summary["qa_objective"]
    settings.pop("window_layout", None)
    settings.pop("block_size", None)
    if summary["window_layout"] != DEFAULT_WINDOW_LAYOUT:
        settings.update(window_layout=summary["window_layout"], block_size=summary["window_block_size"])
    return settings
