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
Spans of different windows are compared on `window_scoring`: by default each span's score relative to the null
("no answer") score of its own window, which stays comparable across windows of a long document (Alberti et al.,
2019); `"raw"` compares raw start + end logits.

`window_layout` says how a window is laid out: `"question_first"` (above: `[CLS] question [SEP] context [SEP]`) or
`"question_prefixed_blocks"`, for blockwise models such as BlockBERT: a window of `n` blocks of `b` tokens, each block
the tokenizer's own pair input `[CLS] question [SEP] context-chunk [SEP]`, so that every block reads the question.

Answers are whole characters as a reader sees them: a span is widened to whole grapheme clusters (a letter and its
combining accents, an emoji sequence), and a whitespace-only span is never an answer.

Works with any `AutoModelForQuestionAnswering` model whose tokenizer is fast and puts the question first (BERT,
RoBERTa, BlockBERT, ...). The windows (`tokenize_windows`) and the post-processing (`rank_answers`: n-best spans, SQuAD
2.0 null answer and its threshold) are shared with the training and evaluation code of `blockbert_hf.train.qa`, so the
pipeline answers from the same windows a fine-tuned model was trained and evaluated on.

This file is copied next to every saved BlockBERT checkpoint (`config.custom_pipelines`), so that
`pipeline("question-answering", model=folder, trust_remote_code=True)` works where `blockbert_hf` is not installed:
it imports only numpy, torch, transformers and `regex` (a dependency of transformers).
"""

import bisect
import functools
import math
import numbers
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace

import numpy as np
import regex
import torch
from transformers.pipelines.base import ChunkPipeline
from transformers.utils import logging

from .question_answering_windows import (
    DEFAULT_WINDOW_LAYOUT,
    WINDOW_LAYOUTS,
    _checked_block_size,
    block_rooms,
    check_window_layout,
    default_max_seq_len,
    max_seq_len_limit,
    pair_template,
    tokenize_windows,
)


logger = logging.get_logger(__name__)

DEFAULT_DOC_STRIDE = 128
# How spans of different windows are compared (see `rank_answers`); a fine-tuned model records the rule it was trained
# for in `config.question_answering["window_scoring"]`, which the pipeline then uses by default.
WINDOW_SCORING_RULES = ("null_relative", "raw")
DEFAULT_WINDOW_SCORING = "null_relative"
QA_SETTINGS_ATTRIBUTE = "question_answering"


# ---------------------------------------------------------------------------------------------------------------------
# Post-processing shared with `blockbert_hf.train.qa`: best spans over windows, n-best list, null answer (SQuAD 2.0)
# ---------------------------------------------------------------------------------------------------------------------


@dataclass
class WindowLogits:
    """One window's model outputs and where its tokens come from.

    `offsets[i]` is the `(start, end)` character span of token `i` in the context, or None when token `i` is not a
    context token (question, special token, padding). Logits may be longer than `offsets` (batch padding); the extra
    positions are ignored. `null_index` is the token whose start/end logits score "no answer" (the CLS token).
    `block_null_indices`, in the question-prefixed layout, is the null token of each block in order (each block's
    CLS, the first being `null_index`): a span is then scored against the null token of the block it starts in
    (`rank_answers`). None: `null_index` for every token.
    """

    start_logits: np.ndarray
    end_logits: np.ndarray
    offsets: Sequence[tuple[int, int] | None]
    null_index: int = 0
    block_null_indices: Sequence[int] | None = None


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

    A span starts and ends on context tokens, has `end >= start`, at most `max_answer_len` context tokens and a
    non-empty character span. Lengths count context tokens only, so a span of the `"question_prefixed_blocks"` layout
    that runs from one block's context into the next is not made longer by the question between them.
    `answer_span(char_start, char_end)`, when given, turns a token span's characters into the answer's
    (`rank_answers` widens them to whole grapheme clusters), or returns None to skip the span; spans that give the
    same answer count once. Exact: every `(start, length)` pair is scored, `O(window length * max_answer_len)`.
    """
    # The context tokens in window order: a span is `context[i]` to `context[i + l]`.
    context = np.array([index for index, offset in enumerate(window.offsets) if offset is not None], dtype=np.int64)
    length = len(context)
    if length == 0:
        return []
    start = np.asarray(window.start_logits, dtype=np.float64)[context]
    end = np.asarray(window.end_logits, dtype=np.float64)[context]
    span_lengths = min(max_answer_len, length)
    # scores[l, i]: the span from context token i to context token i + l.
    scores = np.full((span_lengths, length), -np.inf)
    for extra in range(span_lengths):
        scores[extra, : length - extra] = start[: length - extra] + end[extra:]
    flat = scores.ravel()
    spans, seen = [], set()
    # Best first, until n_best spans are kept (some are skipped: empty, whitespace-only, or seen already).
    for flat_index in _best_first(flat, candidates=4 * n_best):
        extra, first = divmod(int(flat_index), length)
        span = (window.offsets[context[first]][0], window.offsets[context[first + extra]][1])
        if answer_span is not None and span[1] > span[0]:
            span = answer_span(*span)
        if span is None or span[1] <= span[0] or span in seen:
            continue
        seen.add(span)
        spans.append((float(flat[flat_index]), *span))
        if len(spans) == n_best:
            break
    return spans


def _best_first(scores: np.ndarray, candidates: int) -> Iterator[int]:
    """The indices of the finite `scores`, best first and ties in index order: what a stable sort of all of them
    gives, but only the best `candidates` (and every score tied with the last of them) are sorted unless the caller
    reads past them; a window holds thousands of spans and the caller usually stops after `n_best`."""
    valid = np.flatnonzero(np.isfinite(scores))
    if len(valid) > candidates:
        threshold = np.partition(scores[valid], len(valid) - candidates)[len(valid) - candidates]
        above = scores[valid] >= threshold
        for part in (valid[above], valid[~above]):  # every score of the first part beats every one of the second
            yield from part[np.argsort(-scores[part], kind="stable")]
    else:
        yield from valid[np.argsort(-scores[valid], kind="stable")]


# A character a reader sees: not whitespace, not a control character, not an invisible one such as U+200B ZERO WIDTH
# SPACE or U+2060 WORD JOINER (Unicode's default ignorable code points), which `str.strip` keeps.
_VISIBLE_CHARACTER = regex.compile(r"[^\s\p{Cc}\p{Default_Ignorable_Code_Point}]")


def has_visible_text(text: str) -> bool:
    """Whether `text` holds a character a reader sees (`_VISIBLE_CHARACTER`)."""
    return _VISIBLE_CHARACTER.search(text) is not None


@functools.lru_cache(maxsize=8)
def _grapheme_boundaries(context: str) -> list[int]:
    """Where the grapheme clusters of `context` start, and its length; cached since the questions of one document
    share its context."""
    return [match.start() for match in regex.finditer(r"\X", context)] + [len(context)]


def whole_character_spans(context: str) -> Callable[[int, int], tuple[int, int] | None]:
    """`answer_span` for `best_window_spans`: widens `(char_start, char_end)` to whole grapheme clusters of `context`
    (a token may end before a combining accent or inside an emoji sequence), and skips spans with no visible character
    (whitespace or invisible characters such as U+200B only)."""
    boundaries = _grapheme_boundaries(context)

    def answer_span(char_start: int, char_end: int) -> tuple[int, int] | None:
        char_start = boundaries[max(bisect.bisect_right(boundaries, char_start) - 1, 0)]
        char_end = boundaries[min(bisect.bisect_left(boundaries, char_end), len(boundaries) - 1)]
        return (char_start, char_end) if has_visible_text(context[char_start:char_end]) else None

    return answer_span


def check_window_scoring(window_scoring: str) -> str:
    """`window_scoring` if it names a rule of `WINDOW_SCORING_RULES`, else a `ValueError` listing them."""
    if window_scoring not in WINDOW_SCORING_RULES:
        raise ValueError(
            f"window_scoring={window_scoring!r} is unknown: use one of {WINDOW_SCORING_RULES} ('null_relative': "
            "spans scored against their own window's null score; 'raw': raw start + end logits)."
        )
    return window_scoring


_SETTINGS_SOURCE = f'config.{QA_SETTINGS_ATTRIBUTE} (the "{QA_SETTINGS_ATTRIBUTE}" field of the model\'s config.json)'


def qa_settings(config) -> dict:
    """What a model config records about question answering (`config.question_answering`, e.g. the window scoring
    rule it was fine-tuned for), or an empty dict; a `ValueError` when it is not a dict."""
    settings = getattr(config, QA_SETTINGS_ATTRIBUTE, None)
    if settings is None:
        return {}
    if not isinstance(settings, dict):
        raise ValueError(
            f"{_SETTINGS_SOURCE} is {settings!r:.100}, not a dict such as {{'window_scoring': 'null_relative'}}: "
            "correct or remove the field."
        )
    return dict(settings)


def _recorded_setting(config, name: str, default: str, allowed: Sequence[str]) -> str:
    """The setting `name` of `qa_settings`, else `default`; a `ValueError` naming config.json when it is not one of
    `allowed`."""
    value = qa_settings(config).get(name, default)
    if value not in allowed:
        raise ValueError(
            f"{_SETTINGS_SOURCE} records {name} = {value!r}, which is not one of {tuple(allowed)}: correct the field, "
            f"or pass {name}= to override it."
        )
    return value


def model_window_scoring(config) -> str:
    """The window scoring rule a model was fine-tuned for (`config.question_answering`), else the default."""
    return _recorded_setting(config, "window_scoring", DEFAULT_WINDOW_SCORING, WINDOW_SCORING_RULES)


def resolve_window_layout(config, window_layout: str | None = None) -> tuple[str, int | None]:
    """`(layout, block_size)` for a model: `window_layout`, else the layout the model was fine-tuned on
    (`config.question_answering["window_layout"]`), else `"question_first"`. The block size is None for
    `"question_first"`; for `"question_prefixed_blocks"` it is the model's block size (`config.effective_block_size`
    of a BlockBERT model), else `config.question_answering["block_size"]`, else a `ValueError`."""
    if window_layout:
        layout = check_window_layout(window_layout)
    else:
        layout = _recorded_setting(config, "window_layout", DEFAULT_WINDOW_LAYOUT, WINDOW_LAYOUTS)
    if layout == DEFAULT_WINDOW_LAYOUT:
        return layout, None
    block_size = getattr(config, "effective_block_size", None) or qa_settings(config).get("block_size")
    if block_size is None:
        raise ValueError(
            f"window_layout={layout!r} cuts windows into blocks, but the model records no block size: it is not a "
            "BlockBERT model (config.effective_block_size) and config.question_answering has no 'block_size'. Set "
            "config.question_answering['block_size'], or use window_layout='question_first'."
        )
    return layout, _checked_block_size(block_size)


def model_window_layout(config) -> tuple[str, int | None]:
    """The window layout a model was fine-tuned on, and its block size (None for `"question_first"`): see
    `resolve_window_layout`."""
    return resolve_window_layout(config)


def _null_score(window: WindowLogits, null_index: int | None = None) -> float:
    null_index = window.null_index if null_index is None else null_index
    return float(window.start_logits[null_index]) + float(window.end_logits[null_index])


def _relative_to_null(window: WindowLogits) -> WindowLogits:
    """`window` with each token's start logit minus the null score of its block (`block_null_indices`, else the
    window's `null_index`), so that a span's `start + end` is its score relative to the null token of the block it
    starts in."""
    start_logits = np.asarray(window.start_logits, dtype=np.float64)
    nulls = window.block_null_indices or [window.null_index]
    offset = np.full(len(start_logits), _null_score(window, nulls[0]))
    for null_index in nulls[1:]:  # a block runs from its null token to the next block's
        offset[null_index:] = _null_score(window, null_index)
    return replace(window, start_logits=start_logits - offset, block_null_indices=None)


def rank_answers(
    windows: Sequence[WindowLogits],
    context: str,
    *,
    n_best: int = 20,
    max_answer_len: int = 15,
    handle_impossible_answer: bool = False,
    null_score_diff_threshold: float = 0.0,
    window_scoring: str = DEFAULT_WINDOW_SCORING,
) -> RankedAnswers:
    """Ranks the answers of one question over all windows of its context.

    A span's score in its window is `start_logit + end_logit`. How windows are compared is `window_scoring`:
    - `"null_relative"` (default): the span's score minus its window's null score (`start + end` logit of the null
      token), as in the BERT baseline for Natural Questions (Alberti et al., 2019). A model trained with windows
      that do not hold the answer labelled null learns to put a high null score on them, so a span from such a
      window ranks low even where its raw logits are high; raw logits alone are not calibrated across windows.
      In the question-prefixed layout (`block_null_indices`), the null score is that of the block the span starts
      in: there every block begins with its own CLS token, which the heads of shift 0 let read that block only, so
      the first block's CLS scores the first block, and each block's CLS its own.
    - `"raw"`: the raw `start + end` logits (BERT's SQuAD code), fine when the context fits in one window.
    A span seen in several overlapping windows keeps its best score. Spans are widened to whole grapheme clusters and
    whitespace-only ones are skipped (`whole_character_spans`), so an answer never splits what a reader sees as one
    character.
    With `handle_impossible_answer` (SQuAD 2.0), the null answer competes with the spans, minus
    `null_score_diff_threshold` (it wins only when it beats the best span by more than the threshold). Its score is
    0 under `"null_relative"` (the null answer wins when, in every window or block, the null token beats the best
    span scored against it by more than the threshold), and the lowest null score over the windows under `"raw"`
    (BERT's SQuAD 2.0 rule).
    `score` is the softmax of these scores over the returned n-best list (so the scores sum to 1).
    """
    if not windows:
        raise ValueError("rank_answers needs at least one window.")
    if max_answer_len < 1 or n_best < 1:
        raise ValueError(f"max_answer_len ({max_answer_len}) and n_best ({n_best}) must be at least 1.")
    relative = check_window_scoring(window_scoring) == "null_relative"
    best_by_span: dict[tuple[int, int], float] = {}
    answer_span = whole_character_spans(context)
    for window in windows:
        scored = _relative_to_null(window) if relative else window
        for score, char_start, char_end in best_window_spans(scored, max_answer_len, n_best, answer_span):
            if score > best_by_span.get((char_start, char_end), -np.inf):
                best_by_span[(char_start, char_end)] = score
    candidates = sorted(((score, start, end) for (start, end), score in best_by_span.items()), reverse=True)
    entries = [(score, start, end, context[start:end]) for score, start, end in candidates[:n_best]]
    if handle_impossible_answer:
        null_score = 0.0 if relative else min(_null_score(window) for window in windows)
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
# The pipeline
# ---------------------------------------------------------------------------------------------------------------------


def _checked_int(name: str, value, minimum: int) -> int:
    """`value` as an int, or a `ValueError` naming the parameter and what it takes."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral) or value < minimum:
        wanted = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise ValueError(f"{name} must be {wanted}, got {value!r}.")
    return int(value)


def _text_list(name: str, value) -> list:
    """`value` (one text or a non-empty list of them) as a list; the texts themselves are checked per example."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)) and value:
        return list(value)
    raise ValueError(f"{name} must be a string or a non-empty list of strings, got {value!r:.200}.")


@dataclass
class _Window:
    """What postprocess needs besides the logits (kept out of the tensors, so the pipeline's batching leaves it be)."""

    context: str
    offsets: list[tuple[int, int] | None]
    null_index: int
    block_null_indices: list[int]


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
        window_scoring (`str`, defaults to the rule the model was fine-tuned for, else `"null_relative"`): how spans
            of different windows are compared, `"null_relative"` or `"raw"` (see `rank_answers`).
        window_layout (`str`, defaults to the layout the model was fine-tuned on, else `"question_first"`): how a
            window is laid out, `"question_first"` or `"question_prefixed_blocks"` (the question at the start of
            every block of the model's block size; see `tokenize_windows`).
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
        if isinstance(inputs, list) and not inputs:
            raise ValueError("Got an empty list of inputs: pass {'question': ..., 'context': ...} or a list of them.")
        if isinstance(inputs, (dict, list)):  # every example, before the first one runs through the model
            for example in [inputs] if isinstance(inputs, dict) else inputs:
                self._check_example(example)
        return super().__call__(inputs, **kwargs)

    @staticmethod
    def _pair_inputs(question, context):
        if isinstance(question, str) and isinstance(context, str):
            return {"question": question, "context": context}
        questions, contexts = _text_list("question", question), _text_list("context", context)
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
        window_scoring=None,
        window_layout=None,
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
        if window_layout is not None:
            resolve_window_layout(self.model.config, check_window_layout(window_layout))  # a block size is known
            preprocess_params["window_layout"] = window_layout
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
        if window_scoring is not None:
            postprocess_params["window_scoring"] = check_window_scoring(window_scoring)
        # What config.question_answering records is used where no argument overrides it: check it now, at
        # construction and at every call, before any window runs.
        if "window_scoring" not in {**getattr(self, "_postprocess_params", {}), **postprocess_params}:
            model_window_scoring(self.model.config)
        if "window_layout" not in {**getattr(self, "_preprocess_params", {}), **preprocess_params}:
            resolve_window_layout(self.model.config)
        return preprocess_params, {}, postprocess_params

    @staticmethod
    def _check_example(example) -> tuple[str, str]:
        if not isinstance(example, dict) or "question" not in example or "context" not in example:
            raise ValueError(f"Each input must be a dict with 'question' and 'context' keys, got {example!r:.200}.")
        question, context = example["question"], example["context"]
        for name, text in (("question", question), ("context", context)):
            if not isinstance(text, str):
                raise ValueError(f"The {name} is not a string: {text!r:.200}.")
            if not has_visible_text(text):
                raise ValueError(
                    f"The {name} is empty: it has no visible character, only whitespace or invisible characters such "
                    f"as U+200B (got {text!r:.200})."
                )
        return question, context

    def preprocess(self, example, doc_stride=None, max_seq_len=None, window_layout=None):
        question, context = self._check_example(example)
        layout, block_size = resolve_window_layout(self.model.config, window_layout)
        if max_seq_len is None:
            max_seq_len = default_max_seq_len(self.model, self.tokenizer)
        if doc_stride is None:
            doc_stride = min(DEFAULT_DOC_STRIDE, self._context_room(question, max_seq_len, block_size) // 2)
        windows = tokenize_windows(
            self.tokenizer, [question], [context], max_seq_len, doc_stride, layout=layout, block_size=block_size
        )
        model_input_names = [name for name in self.tokenizer.model_input_names if name in windows]
        num_windows = len(windows["input_ids"])
        for index in range(num_windows):
            window = {name: torch.tensor([windows[name][index]]) for name in model_input_names}
            window["window"] = _Window(
                context=context,
                offsets=windows["offsets"][index],
                null_index=windows["null_index"][index],
                block_null_indices=windows["block_null_indices"][index],
            )
            window["is_last"] = index == num_windows - 1
            yield window

    def _context_room(self, question: str, max_seq_len: int, block_size: int | None) -> int:
        """The window length, or with the prefixed layout the context tokens a window holds (at least 0)."""
        if block_size is None:
            return max_seq_len
        question_tokens = len(self.tokenizer(question.lstrip(), add_special_tokens=False)["input_ids"])
        special_tokens = pair_template(self.tokenizer).num_special_tokens
        return max(sum(block_rooms(max_seq_len, block_size, question_tokens, special_tokens)), 0)

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
        window_scoring=None,
    ):
        windows = [
            WindowLogits(
                start_logits=output["start_logits"][0].numpy(),
                end_logits=output["end_logits"][0].numpy(),
                offsets=output["window"].offsets,
                null_index=output["window"].null_index,
                block_null_indices=output["window"].block_null_indices,
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
            window_scoring=window_scoring or model_window_scoring(self.model.config),
        )
        answers = ranked.answers[:top_k]
        return answers[0] if top_k == 1 else answers


__all__ = [
    "DEFAULT_WINDOW_SCORING",
    "WINDOW_SCORING_RULES",
    "ExtractiveQuestionAnsweringPipeline",
    "RankedAnswers",
    "WindowLogits",
    "best_window_spans",
    "check_window_scoring",
    "has_visible_text",
    "model_window_layout",
    "model_window_scoring",
    "qa_settings",
    "rank_answers",
    "resolve_window_layout",
    "whole_character_spans",
]
