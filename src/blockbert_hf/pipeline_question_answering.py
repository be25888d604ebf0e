# Copyright 2026 The blockbert-hf authors.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
"""Extractive question answering over contexts of any length, for transformers 5 (which removed its own
`pipeline("question-answering")`).

The context is cut into windows of at most `max_seq_len` tokens (the question, then as much context as fits) that
overlap by `doc_stride` tokens, using the fast tokenizer's overflowing tokens and offset mapping; every window goes
through the model, and the best span over all windows is returned in character offsets of the original context.

Answers are whole characters as a reader sees them: a span is widened to whole grapheme clusters (a letter and its
combining accents, an emoji sequence), and a whitespace-only span is never an answer.

Works with any `AutoModelForQuestionAnswering` model whose tokenizer is fast and puts the question first (BERT,
RoBERTa, BlockBERT, ...). The windows (`tokenize_windows`) and the post-processing (`rank_answers`: n-best spans, SQuAD
2.0 null answer and its threshold) are shared with the training and evaluation code of `blockbert_hf.qa`, so the
pipeline answers from the same windows a fine-tuned model was trained and evaluated on.

This file is copied next to every saved BlockBERT checkpoint (`config.custom_pipelines`), so that
`pipeline("question-answering", model=folder, trust_remote_code=True)` works where `blockbert_hf` is not installed:
it imports only numpy, torch, transformers and `regex` (a dependency of transformers).
"""

import bisect
import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import regex
import torch
from transformers.pipelines.base import ChunkPipeline
from transformers.utils import logging


logger = logging.get_logger(__name__)

DEFAULT_DOC_STRIDE = 128
# Tokenizers without a recorded length report a huge model_max_length; such a value is no limit.
_NO_LENGTH_LIMIT = 1_000_000


# ---------------------------------------------------------------------------------------------------------------------
# Post-processing shared with `blockbert_hf.qa`: best spans over windows, n-best list, null answer (SQuAD 2.0)
# ---------------------------------------------------------------------------------------------------------------------


@dataclass
class WindowLogits:
    """One window's model outputs and where its tokens come from.

    `offsets[i]` is the `(start, end)` character span of token `i` in the context, or None when token `i` is not a
    context token (question, special token, padding). Logits may be longer than `offsets` (batch padding); the extra
    positions are ignored. `null_index` is the token whose start/end logits score "no answer" (the CLS token).
    """

    start_logits: np.ndarray
    end_logits: np.ndarray
    offsets: Sequence[tuple[int, int] | None]
    null_index: int = 0


@dataclass
class RankedAnswers:
    """`answers`: `{score, start, end, answer}` dicts, best first (the null answer is `start = end = 0`, `answer = ""`
    and is present only when impossible answers are allowed); `null_probability`: the null answer's score (0.0 when
    impossible answers are not allowed)."""

    answers: list[dict]
    null_probability: float


def best_window_spans(
    window: WindowLogits,
    max_answer_len: int,
    n_best: int,
    answer_span: Callable[[int, int], tuple[int, int] | None] | None = None,
) -> list[tuple[float, int, int]]:
    """The `n_best` highest-scoring spans of one window as `(start_logit + end_logit, char_start, char_end)`.

    A span starts and ends on context tokens, has `end >= start`, at most `max_answer_len` tokens and a non-empty
    character span. `answer_span(char_start, char_end)`, when given, turns a token span's characters into the
    answer's (`rank_answers` widens them to whole grapheme clusters), or returns None to skip the span; spans that
    give the same answer count once. Exact: every `(start, length)` pair is scored, `O(window length *
    max_answer_len)`.
    """
    length = len(window.offsets)
    is_context = np.array([offset is not None for offset in window.offsets], dtype=bool)
    start = np.where(is_context, np.asarray(window.start_logits[:length], dtype=np.float64), -np.inf)
    end = np.where(is_context, np.asarray(window.end_logits[:length], dtype=np.float64), -np.inf)
    span_lengths = min(max_answer_len, length)
    # scores[l, i]: the span from token i to token i + l.
    scores = np.full((span_lengths, length), -np.inf)
    for extra in range(span_lengths):
        scores[extra, : length - extra] = start[: length - extra] + end[extra:]
    flat = scores.ravel()
    valid = np.flatnonzero(np.isfinite(flat))
    spans, seen = [], set()
    # Best first, until n_best spans are kept (some are skipped: empty, whitespace-only, or seen already).
    for flat_index in valid[np.argsort(-flat[valid], kind="stable")]:
        extra, first = divmod(int(flat_index), length)
        span = (window.offsets[first][0], window.offsets[first + extra][1])
        if answer_span is not None and span[1] > span[0]:
            span = answer_span(*span)
        if span is None or span[1] <= span[0] or span in seen:
            continue
        seen.add(span)
        spans.append((float(flat[flat_index]), *span))
        if len(spans) == n_best:
            break
    return spans


def whole_character_spans(context: str) -> Callable[[int, int], tuple[int, int] | None]:
    """`answer_span` for `best_window_spans`: widens `(char_start, char_end)` to whole grapheme clusters of `context`
    (a token may end before a combining accent or inside an emoji sequence), and skips whitespace-only spans."""
    boundaries = [match.start() for match in regex.finditer(r"\X", context)] + [len(context)]

    def answer_span(char_start: int, char_end: int) -> tuple[int, int] | None:
        char_start = boundaries[max(bisect.bisect_right(boundaries, char_start) - 1, 0)]
        char_end = boundaries[min(bisect.bisect_left(boundaries, char_end), len(boundaries) - 1)]
        return (char_start, char_end) if context[char_start:char_end].strip() else None

    return answer_span


def rank_answers(
    windows: Sequence[WindowLogits],
    context: str,
    *,
    n_best: int = 20,
    max_answer_len: int = 15,
    handle_impossible_answer: bool = False,
    null_score_diff_threshold: float = 0.0,
) -> RankedAnswers:
    """Ranks the answers of one question over all windows of its context.

    Span scores are `start_logit + end_logit` (comparable across windows, as in BERT's SQuAD code); a span seen in
    several overlapping windows keeps its best score. Spans are widened to whole grapheme clusters and whitespace-only
    ones are skipped (`whole_character_spans`), so an answer never splits what a reader sees as one character.
    With `handle_impossible_answer`, the null answer scores the lowest `start + end` logit of the null token over the
    windows (BERT's SQuAD 2.0 rule), minus `null_score_diff_threshold`: the null answer wins only when it beats the
    best span by more than the threshold.
    `score` is the softmax of these scores over the returned n-best list (so the scores sum to 1).
    """
    if not windows:
        raise ValueError("rank_answers needs at least one window.")
    if max_answer_len < 1 or n_best < 1:
        raise ValueError(f"max_answer_len ({max_answer_len}) and n_best ({n_best}) must be at least 1.")
    best_by_span: dict[tuple[int, int], float] = {}
    answer_span = whole_character_spans(context)
    for window in windows:
        for score, char_start, char_end in best_window_spans(window, max_answer_len, n_best, answer_span):
            if score > best_by_span.get((char_start, char_end), -np.inf):
                best_by_span[(char_start, char_end)] = score
    candidates = sorted(((score, start, end) for (start, end), score in best_by_span.items()), reverse=True)
    entries = [(score, start, end, context[start:end]) for score, start, end in candidates[:n_best]]
    if handle_impossible_answer:
        null_score = min(
            float(window.start_logits[window.null_index]) + float(window.end_logits[window.null_index])
            for window in windows
        )
        entries.append((null_score - null_score_diff_threshold, 0, 0, ""))
        entries.sort(key=lambda entry: entry[0], reverse=True)
    if not entries:
        raise ValueError(
            "No window has a context token to answer from, other than whitespace: is the context empty after "
            "tokenization?"
        )
    scores = np.array([entry[0] for entry in entries], dtype=np.float64)
    probabilities = np.exp(scores - scores.max())
    probabilities /= probabilities.sum()
    answers, null_probability = [], 0.0
    for probability, (_, start, end, text) in zip(probabilities, entries):
        answers.append({"score": float(probability), "start": start, "end": end, "answer": text})
        if handle_impossible_answer and start == end == 0 and text == "":
            null_probability = float(probability)
    return RankedAnswers(answers=answers, null_probability=null_probability)


# ---------------------------------------------------------------------------------------------------------------------
# Windows shared with the training and evaluation features of `blockbert_hf.qa`
# ---------------------------------------------------------------------------------------------------------------------


def context_offsets(offset_mapping, sequence_ids, context_sequence_id: int = 1) -> list[tuple[int, int] | None]:
    """The offsets of one window with None for every token that is not part of the context."""
    return [
        (int(span[0]), int(span[1])) if sequence_id == context_sequence_id else None
        for span, sequence_id in zip(offset_mapping, sequence_ids)
    ]


def check_questions_fit(
    tokenizer,
    questions: Sequence[str],
    max_seq_len: int,
    doc_stride: int,
    question_ids: Sequence[str] | None = None,
    source: str = "the data",
) -> None:
    """Raises a `ValueError` when a question leaves no more context room per window than `doc_stride` (the overlap
    between windows; the tokenizers library panics instead of raising). With `question_ids`, the error names the
    questions that are too long."""
    if not questions:
        return
    lengths = [len(ids) for ids in tokenizer(list(questions), add_special_tokens=False)["input_ids"]]
    rooms = [max_seq_len - length - tokenizer.num_special_tokens_to_add(pair=True) for length in lengths]
    too_long = [index for index, room in enumerate(rooms) if room <= doc_stride]
    if not too_long:
        return
    room = max(rooms[too_long[0]], 0)
    message = (
        f"leaves room for only {room} context tokens in a window of max_seq_len = {max_seq_len} tokens, which must "
        f"exceed doc_stride = {doc_stride} (the overlap between windows). Shorten the question, lower doc_stride, or "
        "use a model with a longer sequence length N."
    )
    if question_ids is None:
        raise ValueError(f"The question {message}")
    ids = [question_ids[index] for index in too_long]
    raise ValueError(f"{len(ids)} question(s) are too long (ids {ids[:5]}). Question {ids[0]!r} of {source} {message}")


def tokenize_windows(
    tokenizer,
    questions: Sequence[str],
    contexts: Sequence[str],
    max_seq_len: int,
    doc_stride: int,
    question_ids: Sequence[str] | None = None,
) -> dict[str, list]:
    """Cuts each (question, context) pair into windows of at most `max_seq_len` tokens: the question, then as much
    context as fits, consecutive windows overlapping by `doc_stride` context tokens. No padding.

    Returns one entry per window under each key:
    - the model inputs the tokenizer makes (`tokenizer.model_input_names`, e.g. `input_ids`, `attention_mask`);
    - `sample_index`: which pair the window comes from (its position in `questions`);
    - `offsets`: the `(start, end)` character span of each token in its context, None for other tokens;
    - `null_index`: the token whose logits score "no answer" (the CLS token, else the first).
    Questions lose their leading spaces (they only waste window room). Raises `check_questions_fit`'s error for a
    question that is too long (named by `question_ids` when given).
    """
    questions = [question.lstrip() for question in questions]
    check_questions_fit(tokenizer, questions, max_seq_len, doc_stride, question_ids)
    encoded = tokenizer(
        questions,
        list(contexts),
        truncation="only_second",
        max_length=max_seq_len,
        stride=doc_stride,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
        padding=False,
    )
    windows = {name: encoded[name] for name in tokenizer.model_input_names if name in encoded}
    windows["sample_index"] = list(encoded["overflow_to_sample_mapping"])
    windows["offsets"] = [
        context_offsets(offsets, encoded.sequence_ids(index)) for index, offsets in enumerate(encoded["offset_mapping"])
    ]
    cls_id = tokenizer.cls_token_id
    windows["null_index"] = [
        input_ids.index(cls_id) if cls_id is not None and cls_id in input_ids else 0
        for input_ids in encoded["input_ids"]
    ]
    return windows


def max_seq_len_limit(model, tokenizer) -> int | None:
    """The longest window the model and tokenizer are known to take: BlockBERT's N (`config.max_sequence_length`)
    and the tokenizer's `model_max_length`, whichever is smaller; None when neither is recorded."""
    limits = []
    model_length = getattr(model.config, "max_sequence_length", None)
    if model_length:
        limits.append(int(model_length))
    tokenizer_length = getattr(tokenizer, "model_max_length", None)
    if tokenizer_length and tokenizer_length < _NO_LENGTH_LIMIT:
        limits.append(int(tokenizer_length))
    return min(limits) if limits else None


def default_max_seq_len(model, tokenizer) -> int:
    """The default window length: `max_seq_len_limit`, or 384 when no limit is recorded."""
    return max_seq_len_limit(model, tokenizer) or 384


# ---------------------------------------------------------------------------------------------------------------------
# The pipeline
# ---------------------------------------------------------------------------------------------------------------------


def _checked_int(name: str, value, minimum: int) -> int:
    """`value` as an int, or a `ValueError` naming the parameter and what it takes."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral) or value < minimum:
        wanted = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise ValueError(f"{name} must be {wanted}, got {value!r}.")
    return int(value)


@dataclass
class _Window:
    """What postprocess needs besides the logits (kept out of the tensors, so the pipeline's batching leaves it be)."""

    context: str
    offsets: list[tuple[int, int] | None]
    null_index: int


class ExtractiveQuestionAnsweringPipeline(ChunkPipeline):
    """Extractive QA for contexts of any length.

    Call with `{"question": ..., "context": ...}`, a list of such dicts, or `question=..., context=...` (strings or
    lists). Returns `{"score", "start", "end", "answer"}` (a list of `top_k` of them when `top_k > 1`), where
    `answer == context[start:end]`.

    Parameters (at construction or per call):
        doc_stride (`int`, defaults to `min(128, max_seq_len // 2)`): overlap in tokens between consecutive windows.
        max_seq_len (`int`, defaults to the model's N): tokens per window, question and special tokens included.
        top_k (`int`, defaults to 1): how many answers to return.
        max_answer_len (`int`, defaults to 15): longest answer, in tokens.
        handle_impossible_answer (`bool`, defaults to False): allow the empty answer (SQuAD 2.0).
        null_score_diff_threshold (`float`, defaults to 0.0): how much the null answer must beat the best span by.
        n_best (`int`, defaults to `max(20, top_k)`): candidates kept per window and overall.
    `batch_size` batches windows (padded on the right per batch), across questions.

    Build it directly for a model object in memory: `ExtractiveQuestionAnsweringPipeline(model=model,
    tokenizer=tokenizer, device=...)`; for a saved BlockBERT folder, `pipeline("question-answering", model=folder,
    trust_remote_code=True)` finds this class through `config.custom_pipelines`.
    """

    _load_processor = False
    _load_image_processor = False
    _load_feature_extractor = False
    _load_video_processor = False
    _load_tokenizer = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.tokenizer is None or not getattr(self.tokenizer, "is_fast", False):
            raise ValueError(
                "ExtractiveQuestionAnsweringPipeline needs a fast tokenizer (windows come from its overflowing tokens "
                f"and offset mapping); got {type(self.tokenizer).__name__}."
            )
        if self.tokenizer.padding_side != "right":
            # Batches are padded with the tokenizer's padding side; BlockBERT (and the offsets here) need right padding.
            logger.warning("Setting tokenizer.padding_side to 'right' for question answering.")
            self.tokenizer.padding_side = "right"

    def __call__(self, inputs=None, *, question=None, context=None, **kwargs):
        if inputs is None:
            if question is None or context is None:
                raise ValueError(
                    "Pass {'question': ..., 'context': ...} (or a list of them), or question= and context=."
                )
            inputs = self._pair_inputs(question, context)
        return super().__call__(inputs, **kwargs)

    @staticmethod
    def _pair_inputs(question, context):
        if isinstance(question, str) and isinstance(context, str):
            return {"question": question, "context": context}
        questions = [question] if isinstance(question, str) else list(question)
        contexts = [context] if isinstance(context, str) else list(context)
        if len(questions) == 1:
            questions = questions * len(contexts)
        if len(contexts) == 1:
            contexts = contexts * len(questions)
        if len(questions) != len(contexts):
            raise ValueError(f"Got {len(questions)} questions but {len(contexts)} contexts: pass as many of each.")
        return [{"question": q, "context": c} for q, c in zip(questions, contexts)]

    def _sanitize_parameters(
        self,
        doc_stride=None,
        max_seq_len=None,
        top_k=None,
        max_answer_len=None,
        handle_impossible_answer=None,
        null_score_diff_threshold=None,
        n_best=None,
        **kwargs,
    ):
        if kwargs:
            raise TypeError(f"Unknown question-answering parameters: {sorted(kwargs)}.")
        preprocess_params = {}
        if doc_stride is not None:
            preprocess_params["doc_stride"] = _checked_int("doc_stride", doc_stride, minimum=0)
        if max_seq_len is not None:
            max_seq_len = _checked_int("max_seq_len", max_seq_len, minimum=1)
            limit = max_seq_len_limit(self.model, self.tokenizer)
            if limit is not None and max_seq_len > limit:
                raise ValueError(
                    f"max_seq_len = {max_seq_len} exceeds the longest window this model and tokenizer take ({limit} "
                    "tokens); pass at most that, or leave max_seq_len unset to use it."
                )
            preprocess_params["max_seq_len"] = max_seq_len
        postprocess_params = {}
        if top_k is not None:
            postprocess_params["top_k"] = _checked_int("top_k", top_k, minimum=1)
        if max_answer_len is not None:
            postprocess_params["max_answer_len"] = _checked_int("max_answer_len", max_answer_len, minimum=1)
        if n_best is not None:
            postprocess_params["n_best"] = _checked_int("n_best", n_best, minimum=1)
        if handle_impossible_answer is not None:
            if not isinstance(handle_impossible_answer, (bool, np.bool_)):
                raise ValueError(f"handle_impossible_answer must be True or False, got {handle_impossible_answer!r}.")
            postprocess_params["handle_impossible_answer"] = bool(handle_impossible_answer)
        if null_score_diff_threshold is not None:
            if (
                isinstance(null_score_diff_threshold, (bool, np.bool_))
                or not isinstance(null_score_diff_threshold, numbers.Real)
                or not math.isfinite(null_score_diff_threshold)
            ):
                raise ValueError(
                    f"null_score_diff_threshold must be a finite number, got {null_score_diff_threshold!r}."
                )
            postprocess_params["null_score_diff_threshold"] = float(null_score_diff_threshold)
        return preprocess_params, {}, postprocess_params

    @staticmethod
    def _check_example(example) -> tuple[str, str]:
        if not isinstance(example, dict) or "question" not in example or "context" not in example:
            raise ValueError(f"Each input must be a dict with 'question' and 'context' keys, got {example!r:.200}.")
        question, context = example["question"], example["context"]
        if not isinstance(question, str) or not question.strip():
            raise ValueError(f"The question is empty or not a string: {question!r:.200}.")
        if not isinstance(context, str) or not context.strip():
            raise ValueError(f"The context is empty or not a string (question: {question!r:.200}).")
        return question, context

    def preprocess(self, example, doc_stride=None, max_seq_len=None):
        question, context = self._check_example(example)
        if max_seq_len is None:
            max_seq_len = default_max_seq_len(self.model, self.tokenizer)
        if doc_stride is None:
            doc_stride = min(DEFAULT_DOC_STRIDE, max_seq_len // 2)
        windows = tokenize_windows(self.tokenizer, [question], [context], max_seq_len, doc_stride)
        model_input_names = [name for name in self.tokenizer.model_input_names if name in windows]
        num_windows = len(windows["input_ids"])
        for index in range(num_windows):
            window = {name: torch.tensor([windows[name][index]]) for name in model_input_names}
            window["window"] = _Window(
                context=context, offsets=windows["offsets"][index], null_index=windows["null_index"][index]
            )
            window["is_last"] = index == num_windows - 1
            yield window

    def _forward(self, inputs):
        window, is_last = inputs.pop("window"), inputs.pop("is_last")
        outputs = self.model(**inputs)
        return {
            "start_logits": outputs.start_logits.float(),
            "end_logits": outputs.end_logits.float(),
            "window": window,
            "is_last": is_last,
        }

    def postprocess(
        self,
        model_outputs,
        top_k=1,
        max_answer_len=15,
        handle_impossible_answer=False,
        null_score_diff_threshold=0.0,
        n_best=None,
    ):
        windows = [
            WindowLogits(
                start_logits=output["start_logits"][0].numpy(),
                end_logits=output["end_logits"][0].numpy(),
                offsets=output["window"].offsets,
                null_index=output["window"].null_index,
            )
            for output in model_outputs
        ]
        ranked = rank_answers(
            windows,
            model_outputs[0]["window"].context,
            n_best=max(20, top_k) if n_best is None else max(n_best, top_k),
            max_answer_len=max_answer_len,
            handle_impossible_answer=handle_impossible_answer,
            null_score_diff_threshold=null_score_diff_threshold,
        )
        answers = ranked.answers[:top_k]
        return answers[0] if top_k == 1 else answers


__all__ = [
    "ExtractiveQuestionAnsweringPipeline",
    "RankedAnswers",
    "WindowLogits",
    "best_window_spans",
    "check_questions_fit",
    "context_offsets",
    "default_max_seq_len",
    "max_seq_len_limit",
    "rank_answers",
    "tokenize_windows",
    "whole_character_spans",
]
