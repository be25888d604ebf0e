"""Window features for QA training and evaluation, as batched `datasets.map` functions.

The windows come from the pipeline's `tokenize_windows` (windows of `max_seq_length` tokens overlapping by
`doc_stride`, laid out as `layout` says, no padding: batches are padded on the right by the collator, so short
paragraphs cost little), so a fine-tuned model is trained and scored on exactly the windows the pipeline later answers
from.
"""

import hashlib
from collections.abc import Iterable

from ...model.question_answering_windows import DEFAULT_WINDOW_LAYOUT, check_questions_fit, tokenize_windows


# Columns of the evaluation features that post-processing reads and the model does not take.
EVAL_METADATA_COLUMNS = ("example_id", "null_index", "block_null_indices", "offset_mapping")


def check_question_lengths(
    ids: Iterable[str],
    questions: Iterable[str],
    tokenizer,
    max_seq_length: int,
    doc_stride: int,
    name: str = "the data",
    layout: str = DEFAULT_WINDOW_LAYOUT,
    block_size: int | None = None,
) -> None:
    """Raises a `ValueError` naming the questions that leave no more context room per window than `doc_stride`, or,
    with the `"question_prefixed_blocks"` layout, no room for a context token in a block of `block_size` tokens."""
    questions = [question.lstrip() for question in questions]
    check_questions_fit(
        tokenizer,
        questions,
        max_seq_length,
        doc_stride,
        question_ids=list(ids),
        source=name,
        layout=layout,
        block_size=block_size,
    )


def _answer_tokens(offsets: list, answer_start: int, answer_text: str, null_index: int) -> tuple[int, int]:
    """First and last token of the answer in one window, or the null token twice when the window does not hold all
    of it (`offsets` are None outside the context; with the `"question_prefixed_blocks"` layout also between the
    context chunks of two blocks, so an answer may start in one block and end in the next)."""
    context_tokens = [index for index, span in enumerate(offsets) if span is not None]
    if not context_tokens:
        return null_index, null_index
    start_char, end_char = answer_start, answer_start + len(answer_text)
    if offsets[context_tokens[0]][0] > start_char or offsets[context_tokens[-1]][1] < end_char:
        return null_index, null_index
    start = 0  # the last context token that starts at or before the answer
    while start < len(context_tokens) and offsets[context_tokens[start]][0] <= start_char:
        start += 1
    end = len(context_tokens) - 1  # the first of the context tokens at the end that end at or after the answer
    while end >= 0 and offsets[context_tokens[end]][1] >= end_char:
        end -= 1
    return context_tokens[start - 1], context_tokens[end + 1]


def _window_labels(answers: dict, offsets: list, null_index: int) -> tuple[int, int]:
    """The first answer's first and last token in the window, or the null token twice (no answer in the window)."""
    if not answers["answer_start"]:
        return null_index, null_index
    return _answer_tokens(offsets, answers["answer_start"][0], answers["text"][0], null_index)


def _example_windows(examples: dict, tokenizer, max_seq_length, doc_stride, layout, block_size) -> dict:
    """The pipeline's windows of a batch of SQuAD-style rows (`tokenize_windows`)."""
    return tokenize_windows(
        tokenizer,
        examples["question"],
        examples["context"],
        max_seq_length,
        doc_stride,
        question_ids=examples["id"],
        layout=layout,
        block_size=block_size,
    )


def keeps_negative_window(seed: int, question_id: str, window: int, rate: float) -> bool:
    """Whether the sampling of negative windows at `rate` keeps window number `window` of a question: a draw in
    [0, 1) fixed by `(seed, question_id, window)`, so the sample does not depend on batching or processes."""
    if rate >= 1.0:
        return True
    digest = hashlib.sha256(f"{seed}:{question_id}:{window}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < rate


def prepare_train_features(
    examples: dict,
    tokenizer,
    max_seq_length: int,
    doc_stride: int,
    negative_window_rate: float = 1.0,
    seed: int = 0,
    layout: str = DEFAULT_WINDOW_LAYOUT,
    block_size: int | None = None,
) -> dict:
    """Windows with `start_positions`/`end_positions` of the first answer, or of the null (CLS) token when the answer
    is not inside the window or the question has none.

    Negative windows, the windows of an answerable question that do not hold its answer, are kept at
    `negative_window_rate` (a seeded draw per window, `keeps_negative_window`; 1 keeps all). On long contexts they
    are most windows: sampling them keeps the training set balanced while still teaching the model a high null score
    on windows without the answer, which the `"null_relative"` window scoring relies on. Every window of an
    unanswerable question (SQuAD 2.0) is kept: it is what teaches the null answer. `layout` and `block_size`: the
    window layout (`tokenize_windows`)."""
    if not 0.0 <= negative_window_rate <= 1.0:
        raise ValueError(f"negative_window_rate must be in [0, 1], got {negative_window_rate}.")
    windows = _example_windows(examples, tokenizer, max_seq_length, doc_stride, layout, block_size)
    names = [name for name in tokenizer.model_input_names if name in windows]
    features = {name: [] for name in [*names, "start_positions", "end_positions"]}
    first_window = {}
    for index, (sample, offsets, null_index) in enumerate(
        zip(windows["sample_index"], windows["offsets"], windows["null_index"])
    ):
        answers = examples["answers"][sample]
        start, end = _window_labels(answers, offsets, null_index)
        if answers["answer_start"]:
            window = index - first_window.setdefault(sample, index)
            is_negative = start == end == null_index
            if is_negative and not keeps_negative_window(seed, examples["id"][sample], window, negative_window_rate):
                continue
        for name in names:
            features[name].append(windows[name][index])
        features["start_positions"].append(start)
        features["end_positions"].append(end)
    return features


def prepare_eval_features(
    examples: dict,
    tokenizer,
    max_seq_length: int,
    doc_stride: int,
    layout: str = DEFAULT_WINDOW_LAYOUT,
    block_size: int | None = None,
) -> dict:
    """Windows with their `example_id`, `null_index`, `block_null_indices` and `offset_mapping` (None for tokens
    outside the context), and the training labels of every window (`start_positions`/`end_positions`), for the
    evaluation loss. `layout` and `block_size`: the window layout (`tokenize_windows`)."""
    windows = _example_windows(examples, tokenizer, max_seq_length, doc_stride, layout, block_size)
    features = {name: windows[name] for name in tokenizer.model_input_names if name in windows}
    features["start_positions"], features["end_positions"] = [], []
    for sample, offsets, null_index in zip(windows["sample_index"], windows["offsets"], windows["null_index"]):
        start, end = _window_labels(examples["answers"][sample], offsets, null_index)
        features["start_positions"].append(start)
        features["end_positions"].append(end)
    features["example_id"] = [examples["id"][sample] for sample in windows["sample_index"]]
    features["null_index"] = windows["null_index"]
    features["block_null_indices"] = windows["block_null_indices"]
    features["offset_mapping"] = windows["offsets"]
    return features
