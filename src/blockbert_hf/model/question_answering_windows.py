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
"""The windows of extractive question answering, shared by the pipeline (`pipeline_question_answering.py`) and the
training and evaluation features of `blockbert_hf.train.qa`: a context cut into windows of at most `max_seq_len`
tokens that overlap by `doc_stride`, laid out `"question_first"` or as `"question_prefixed_blocks"`, and the checks
that a question fits its window.

Carried with the pipeline next to every saved BlockBERT checkpoint: it imports only torch and transformers.
"""

import numbers
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


# How a window is laid out (see `tokenize_windows`); a fine-tuned model records the layout it was trained on in
# `config.question_answering["window_layout"]` (with `"block_size"`), which the pipeline then uses by default.
WINDOW_LAYOUTS = ("question_first", "question_prefixed_blocks")
DEFAULT_WINDOW_LAYOUT = "question_first"
# Tokenizers without a recorded length report a huge model_max_length; such a value is no limit.
_NO_LENGTH_LIMIT = 1_000_000


def check_window_layout(window_layout: str) -> str:
    """`window_layout` if it names a layout of `WINDOW_LAYOUTS`, else a `ValueError` listing them."""
    if window_layout not in WINDOW_LAYOUTS:
        raise ValueError(
            f"window_layout={window_layout!r} is unknown: use one of {WINDOW_LAYOUTS} ('question_first': the "
            "question, then the context; 'question_prefixed_blocks': every block of b tokens holds the question, then "
            "its chunk of the context)."
        )
    return window_layout


def context_offsets(offset_mapping, sequence_ids, context_sequence_id: int = 1) -> list[tuple[int, int] | None]:
    """The offsets of one window with None for every token that is not part of the context."""
    return [
        (int(span[0]), int(span[1])) if sequence_id == context_sequence_id else None
        for span, sequence_id in zip(offset_mapping, sequence_ids)
    ]


def _checked_block_size(block_size) -> int:
    if isinstance(block_size, (bool, np.bool_)) or not isinstance(block_size, numbers.Integral) or block_size < 1:
        raise ValueError(f"block_size must be a positive integer (b, tokens per block), got {block_size!r}.")
    return int(block_size)


def _check_window_geometry(layout: str, max_seq_len: int, block_size) -> int | None:
    """The checked block size of `layout` (None for `"question_first"`), or a `ValueError` when `max_seq_len` and
    `block_size` do not make windows."""
    check_window_layout(layout)
    if isinstance(max_seq_len, (bool, np.bool_)) or not isinstance(max_seq_len, numbers.Integral) or max_seq_len < 1:
        raise ValueError(f"max_seq_len must be a positive integer, got {max_seq_len!r}.")
    if layout == DEFAULT_WINDOW_LAYOUT:
        return None
    if block_size is None:
        raise ValueError(
            f"window_layout={layout!r} needs block_size, the model's block size b (config.effective_block_size of a "
            "BlockBERT model): windows are cut into blocks of b tokens."
        )
    return _checked_block_size(block_size)


def block_rooms(max_seq_len: int, block_size: int, question_tokens: int, special_tokens: int) -> list[int]:
    """The context tokens each block of a `"question_prefixed_blocks"` window has room for: blocks of `block_size`
    tokens, the last one of what is left of `max_seq_len` (all of it when `max_seq_len < block_size`), each holding
    the question and the pair's special tokens. A last, shorter block with no room for a context token is left out.
    A first entry below 1 means the question does not fit in a block."""
    lengths = [block_size] * (max_seq_len // block_size)
    if max_seq_len % block_size:
        lengths.append(max_seq_len % block_size)
    rooms = [length - question_tokens - special_tokens for length in lengths]
    if len(rooms) > 1 and rooms[-1] < 1:
        rooms.pop()
    return rooms


def check_questions_fit(
    tokenizer,
    questions: Sequence[str],
    max_seq_len: int,
    doc_stride: int,
    question_ids: Sequence[str] | None = None,
    source: str = "the data",
    *,
    layout: str = DEFAULT_WINDOW_LAYOUT,
    block_size: int | None = None,
) -> None:
    """Raises a `ValueError` when a question leaves no more context room per window than `doc_stride` (the overlap
    between windows; the tokenizers library panics instead of raising), or, with the `"question_prefixed_blocks"`
    layout, no room for a context token in a block of `block_size` tokens. With `question_ids`, the error names the
    questions that are too long."""
    block_size = _check_window_geometry(layout, max_seq_len, block_size)
    if not questions:
        return
    lengths = [len(ids) for ids in tokenizer(list(questions), add_special_tokens=False)["input_ids"]]
    if block_size is not None:
        _check_block_questions_fit(tokenizer, lengths, max_seq_len, block_size, doc_stride, question_ids, source)
        return
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
    _raise_too_long(too_long, message, question_ids, source)


def _raise_too_long(too_long: list[int], message: str, question_ids, source: str) -> None:
    if question_ids is None:
        raise ValueError(f"The question {message}")
    ids = [question_ids[index] for index in too_long]
    raise ValueError(f"{len(ids)} question(s) are too long (ids {ids[:5]}). Question {ids[0]!r} of {source} {message}")


def _check_block_questions_fit(tokenizer, lengths, max_seq_len, block_size, doc_stride, question_ids, source) -> None:
    """`check_questions_fit` for the `"question_prefixed_blocks"` layout (question lengths in tokens)."""
    special = pair_template(tokenizer).num_special_tokens
    rooms = [block_rooms(max_seq_len, block_size, length, special) for length in lengths]
    too_long = [index for index, room in enumerate(rooms) if room[0] < 1]
    if too_long:
        index = too_long[0]
        block_length = min(block_size, max_seq_len)
        message = (
            f"leaves room for only {max(rooms[index][0], 0)} context tokens in a block of {block_length} tokens "
            f"(block_size = {block_size}; with window_layout='question_prefixed_blocks' every block holds the "
            f"question, {lengths[index]} tokens, and {special} special tokens). Shorten the question or use larger "
            "blocks (a model with a larger block size b)."
        )
        _raise_too_long(too_long, message, question_ids, source)
    too_long = [index for index, room in enumerate(rooms) if sum(room) <= doc_stride]
    if too_long:
        index = too_long[0]
        message = (
            f"leaves room for only {sum(rooms[index])} context tokens in a window of max_seq_len = {max_seq_len} "
            f"tokens ({len(rooms[index])} block(s) of block_size = {block_size}, each holding the question and "
            f"{special} special tokens), which must exceed doc_stride = {doc_stride} (the overlap between windows). "
            "Shorten the question, lower doc_stride, or use larger blocks."
        )
        _raise_too_long(too_long, message, question_ids, source)


@dataclass(frozen=True)
class PairTemplate:
    """The tokenizer's own layout of a (question, context) pair, e.g. RoBERTa's `<s> A </s></s> B </s>` or BERT's
    `[CLS] A [SEP] B [SEP]`: `pieces` in order, each `(sequence, token_id, token_type)` where `sequence` is 0 (the
    question's tokens go here), 1 (the context's) or None (the special token `token_id`)."""

    pieces: tuple[tuple[int | None, int | None, int], ...]

    @property
    def num_special_tokens(self) -> int:
        return sum(sequence is None for sequence, _, _ in self.pieces)

    def build(self, question_ids: Sequence[int], context_ids: Sequence[int]) -> tuple[list[int], list[int], list]:
        """`(input_ids, token_type_ids, sequence_ids)` of the pair, as the tokenizer would make them from these ids."""
        input_ids, token_type_ids, sequence_ids = [], [], []
        for sequence, token_id, token_type in self.pieces:
            ids = [token_id] if sequence is None else list(question_ids if sequence == 0 else context_ids)
            input_ids.extend(ids)
            token_type_ids.extend([token_type] * len(ids))
            sequence_ids.extend([sequence] * len(ids))
        return input_ids, token_type_ids, sequence_ids


# Two short texts that every tokenizer turns into at least one token each, to read its pair template from.
_TEMPLATE_TEXTS = ("a", "b")


def pair_template(tokenizer) -> PairTemplate:
    """The tokenizer's pair template, read from its encoding of two placeholder texts (fast tokenizers of
    transformers 5 have no `build_inputs_with_special_tokens`): the special tokens and token types around each
    sequence."""
    encoded = tokenizer(*_TEMPLATE_TEXTS, return_token_type_ids=True)
    sequence_ids = encoded.sequence_ids(0)
    pieces = []
    for token_id, token_type, sequence in zip(encoded["input_ids"], encoded["token_type_ids"], sequence_ids):
        if sequence is None:
            pieces.append((None, int(token_id), int(token_type)))
        elif not pieces or pieces[-1][0] != sequence:
            pieces.append((sequence, None, int(token_type)))
    if sorted(sequence for sequence, _, _ in pieces if sequence is not None) != [0, 1]:
        raise ValueError(
            f"Cannot read the pair template of {type(tokenizer).__name__}: encoding {_TEMPLATE_TEXTS} gave the "
            f"sequence ids {sequence_ids}, not one run of tokens for each text."
        )
    return PairTemplate(tuple(pieces))


def tokenize_windows(
    tokenizer,
    questions: Sequence[str],
    contexts: Sequence[str],
    max_seq_len: int,
    doc_stride: int,
    question_ids: Sequence[str] | None = None,
    layout: str = DEFAULT_WINDOW_LAYOUT,
    block_size: int | None = None,
) -> dict[str, list]:
    """Cuts each (question, context) pair into windows of at most `max_seq_len` tokens, consecutive windows
    overlapping by `doc_stride` context tokens. No padding. `layout`:
    - `"question_first"` (default): the question, then as much context as fits (the tokenizer's overflowing tokens);
    - `"question_prefixed_blocks"` (needs `block_size`, b): blocks of b tokens, each the tokenizer's pair template
      around the question and the next chunk of the context (RoBERTa: `<s> question </s></s> chunk </s>`), so every
      block is an input the encoder was trained on. Every block of a window is full but its last (the last window of
      a context may be shorter); the last block of `max_seq_len` is shorter when `max_seq_len` is not a multiple of
      b, and left out when too short for the question and a context token. The question is repeated in every block,
      its tokens are never answers.

    Returns one entry per window under each key:
    - the model inputs the tokenizer makes (`tokenizer.model_input_names`, e.g. `input_ids`, `attention_mask`);
    - `sample_index`: which pair the window comes from (its position in `questions`);
    - `offsets`: the `(start, end)` character span of each token in its context, None for other tokens;
    - `null_index`: the token whose logits score "no answer" (the CLS token, else the first; in the prefixed layout
      the first block's);
    - `block_null_indices`: each block's null token, in order (one, `null_index`, in the `"question_first"` layout).
    Questions lose their leading spaces (they only waste window room). Raises `check_questions_fit`'s error for a
    question that is too long (named by `question_ids` when given) and a `ValueError` for an unknown layout or a
    missing or bad `block_size`.
    """
    questions = [question.lstrip() for question in questions]
    check_questions_fit(
        tokenizer, questions, max_seq_len, doc_stride, question_ids, layout=layout, block_size=block_size
    )
    # Both layouts are blocks built from each distinct context tokenized once (the questions of a long document share
    # it): "question_first" is one block of max_seq_len, the same windows as the tokenizer's overflowing tokens.
    block_size = int(block_size) if layout == "question_prefixed_blocks" else max_seq_len
    return _block_windows(tokenizer, questions, list(contexts), max_seq_len, doc_stride, block_size)


def _block_windows(tokenizer, questions, contexts, max_seq_len, doc_stride, block_size) -> dict[str, list]:
    """`tokenize_windows` once its arguments are checked: windows of blocks of `block_size` (`block_rooms`)."""
    template = pair_template(tokenizer)
    # verbose=False: whole contexts are longer than the model takes, which is what the windows are for.
    question_tokens = tokenizer(questions, add_special_tokens=False, verbose=False)["input_ids"]
    # Each distinct context once: the questions of one long document share it (the same tokens as one call each).
    distinct = list(dict.fromkeys(contexts))
    encoded = tokenizer(distinct, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
    position = {context: index for index, context in enumerate(distinct)}
    distinct_offsets = [[(int(start), int(end)) for start, end in spans] for spans in encoded["offset_mapping"]]
    context_tokens = {
        "input_ids": [encoded["input_ids"][position[context]] for context in contexts],
        "offset_mapping": [distinct_offsets[position[context]] for context in contexts],
    }
    names = [name for name in tokenizer.model_input_names if name in ("input_ids", "token_type_ids", "attention_mask")]
    windows = {name: [] for name in [*names, "sample_index", "offsets", "null_index", "block_null_indices"]}
    cls_id = tokenizer.cls_token_id
    for sample, (question, context_ids, context_offsets) in enumerate(
        zip(question_tokens, context_tokens["input_ids"], context_tokens["offset_mapping"])
    ):
        rooms = block_rooms(max_seq_len, block_size, len(question), template.num_special_tokens)
        window_start = 0
        while True:
            window_end = min(window_start + sum(rooms), len(context_ids))
            input_ids, token_type_ids, offsets, block_nulls = [], [], [], []
            chunk_start = window_start
            for room in rooms:
                chunk_end = min(chunk_start + room, window_end)
                block_ids, block_types, sequence_ids = template.build(question, context_ids[chunk_start:chunk_end])
                block_nulls.append(len(input_ids) + (block_ids.index(cls_id) if cls_id in block_ids else 0))
                input_ids.extend(block_ids)
                token_type_ids.extend(block_types)
                # The context is one run of the template (pair_template checks it): None before and after it.
                first = sequence_ids.index(1) if chunk_end > chunk_start else len(sequence_ids)
                offsets.extend([None] * first)
                offsets.extend(context_offsets[chunk_start:chunk_end])
                offsets.extend([None] * (len(sequence_ids) - first - (chunk_end - chunk_start)))
                chunk_start = chunk_end
                if chunk_start >= window_end:
                    break
            inputs = {"input_ids": input_ids, "token_type_ids": token_type_ids, "attention_mask": [1] * len(input_ids)}
            for name in names:
                windows[name].append(inputs[name])
            windows["sample_index"].append(sample)
            windows["offsets"].append(offsets)
            windows["null_index"].append(block_nulls[0])
            windows["block_null_indices"].append(block_nulls)
            if window_end >= len(context_ids):
                break
            window_start = window_end - doc_stride
    return windows


def max_seq_len_limit(model, tokenizer) -> int | None:
    """The longest window the model takes: BlockBERT's N (`config.max_sequence_length`), else the tokenizer's
    `model_max_length`; None when neither is recorded. The model's N wins: it changes when the model is loaded with
    other blocks (`num_blocks=` with block-relative positions), and the saved tokenizer records the N it was saved
    with."""
    model_length = getattr(model.config, "max_sequence_length", None)
    if model_length:
        return int(model_length)
    tokenizer_length = getattr(tokenizer, "model_max_length", None)
    if tokenizer_length and tokenizer_length < _NO_LENGTH_LIMIT:
        return int(tokenizer_length)
    return None


def default_max_seq_len(model, tokenizer) -> int:
    """The default window length: `max_seq_len_limit`, or 384 when no limit is recorded."""
    return max_seq_len_limit(model, tokenizer) or 384


__all__ = [
    "DEFAULT_WINDOW_LAYOUT",
    "WINDOW_LAYOUTS",
    "PairTemplate",
    "block_rooms",
    "check_questions_fit",
    "check_window_layout",
    "context_offsets",
    "default_max_seq_len",
    "max_seq_len_limit",
    "pair_template",
    "tokenize_windows",
]
