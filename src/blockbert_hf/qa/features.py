"""Window features for QA training and evaluation, as batched `datasets.map` functions.

The windows come from the pipeline's `tokenize_windows` (windows of `max_seq_length` tokens overlapping by
`doc_stride`, no padding: batches are padded on the right by the collator, so short paragraphs cost little), so a
fine-tuned model is trained and scored on exactly the windows the pipeline later answers from.
"""

from collections.abc import Iterable

from ..pipeline_question_answering import check_questions_fit, tokenize_windows


# Columns of the evaluation features that post-processing reads and the model does not take.
EVAL_METADATA_COLUMNS = ("example_id", "null_index", "offset_mapping")


def check_question_lengths(
    ids: Iterable[str],
    questions: Iterable[str],
    tokenizer,
    max_seq_length: int,
    doc_stride: int,
    name: str = "the data",
) -> None:
    """Raises a `ValueError` naming the questions that leave no more context room per window than `doc_stride`."""
    questions = [question.lstrip() for question in questions]
    check_questions_fit(tokenizer, questions, max_seq_length, doc_stride, question_ids=list(ids), source=name)


def _answer_tokens(offsets: list, answer_start: int, answer_text: str, null_index: int) -> tuple[int, int]:
    """First and last token of the answer in one window, or the null token twice when the window does not hold all
    of it (`offsets` are None outside the context)."""
    context_tokens = [index for index, span in enumerate(offsets) if span is not None]
    if not context_tokens:
        return null_index, null_index
    start_char, end_char = answer_start, answer_start + len(answer_text)
    first, last = context_tokens[0], context_tokens[-1]
    if offsets[first][0] > start_char or offsets[last][1] < end_char:
        return null_index, null_index
    start_token = first
    while start_token <= last and offsets[start_token][0] <= start_char:
        start_token += 1
    end_token = last
    while end_token >= first and offsets[end_token][1] >= end_char:
        end_token -= 1
    return start_token - 1, end_token + 1


def prepare_train_features(examples: dict, tokenizer, max_seq_length: int, doc_stride: int) -> dict:
    """Windows with `start_positions`/`end_positions` of the first answer, or of the null (CLS) token when the answer
    is not inside the window or the question has none."""
    windows = tokenize_windows(
        tokenizer, examples["question"], examples["context"], max_seq_length, doc_stride, question_ids=examples["id"]
    )
    features = {name: windows[name] for name in tokenizer.model_input_names if name in windows}
    features["start_positions"], features["end_positions"] = [], []
    for sample, offsets, null_index in zip(windows["sample_index"], windows["offsets"], windows["null_index"]):
        answers = examples["answers"][sample]
        start, end = null_index, null_index
        if answers["answer_start"]:
            start, end = _answer_tokens(offsets, answers["answer_start"][0], answers["text"][0], null_index)
        features["start_positions"].append(start)
        features["end_positions"].append(end)
    return features


def prepare_eval_features(examples: dict, tokenizer, max_seq_length: int, doc_stride: int) -> dict:
    """Windows with their `example_id`, `null_index` and `offset_mapping` (None for tokens outside the context)."""
    windows = tokenize_windows(
        tokenizer, examples["question"], examples["context"], max_seq_length, doc_stride, question_ids=examples["id"]
    )
    features = {name: windows[name] for name in tokenizer.model_input_names if name in windows}
    features["example_id"] = [examples["id"][sample] for sample in windows["sample_index"]]
    features["null_index"] = windows["null_index"]
    features["offset_mapping"] = windows["offsets"]
    return features
