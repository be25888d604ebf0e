"""Filling a question's context with the neighbouring paragraphs of its article, up to a token budget T.

A SQuAD article is read as `Article` records (`read_articles`). `fill_window` chooses the paragraphs around a
question's answer paragraph that fit in T tokens, with a seeded share of the room before it (`answer_fraction`);
`make_example` joins them with `SEPARATOR` and moves the answers' offsets into the joined context. A filled context is
at most T tokens and, unless it is the whole article, less than one paragraph short of T.
"""

import json
import os
import random
from collections.abc import Sequence
from dataclasses import dataclass

from transformers import PreTrainedTokenizerBase

from blockbert_hf.saving import open_text
from blockbert_hf.train.qa.data import read_squad_json


SEPARATOR = "\n"  # between joined paragraphs; the answer offsets account for it
_TOKENIZE_BATCH = 64


@dataclass(frozen=True)
class Answer:
    text: str
    start: int


@dataclass(frozen=True)
class Question:
    id: str
    question: str
    paragraph: int  # index of its paragraph in the article
    answers: tuple[Answer, ...]


@dataclass(frozen=True)
class Article:
    title: str
    paragraphs: tuple[str, ...]
    questions: tuple[Question, ...]


@dataclass(frozen=True)
class Example:
    """One question of a built set: its context is `article.paragraphs[start:end]` joined with `SEPARATOR`."""

    article: Article
    question: Question
    start: int
    end: int
    context: str
    answers: tuple[Answer, ...]


def read_articles(path: str | os.PathLike) -> list[Article]:
    """The articles of a SQuAD-format `.json(.gz)` file, paragraph by paragraph with their questions."""
    read_squad_json(path)  # raises a clear error for records that lack SQuAD fields
    with open_text(path) as handle:
        data = json.load(handle)
    articles = []
    for article in data["data"]:
        paragraphs = tuple(paragraph["context"] for paragraph in article["paragraphs"])
        questions = tuple(
            Question(
                id=str(qa["id"]),
                question=qa["question"],
                paragraph=index,
                answers=()
                if qa.get("is_impossible")
                else tuple(Answer(answer["text"], int(answer["answer_start"])) for answer in qa["answers"]),
            )
            for index, paragraph in enumerate(article["paragraphs"])
            for qa in paragraph["qas"]
        )
        articles.append(Article(article.get("title", ""), paragraphs, questions))
    return articles


def token_counts(texts: Sequence[str], tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """Tokens of each text alone (no special tokens)."""
    counts = []
    for begin in range(0, len(texts), _TOKENIZE_BATCH):
        batch = list(texts[begin : begin + _TOKENIZE_BATCH])
        # verbose=False: whole articles exceed the tokenizer's model_max_length, which is fine for counting
        encoded = tokenizer(batch, add_special_tokens=False, verbose=False)["input_ids"]
        counts.extend(len(ids) for ids in encoded)
    return counts


def fill_window(
    lengths: Sequence[int], answer: int, target: int, fraction: float, separator_tokens: int = 0
) -> tuple[int, int]:
    """The paragraphs `[start, end)` of an article (paragraph token counts `lengths`) around paragraph `answer`,
    at most `target` tokens in all, with about `fraction` of the room beside the answer paragraph before it."""
    if lengths[answer] > target:
        raise ValueError(f"The answer paragraph has {lengths[answer]} tokens, more than the target {target}.")
    start, end, used = answer, answer + 1, lengths[answer]
    room_before = fraction * (target - lengths[answer])
    before = 0
    while start > 0 and before + lengths[start - 1] + separator_tokens <= room_before:
        start -= 1
        before += lengths[start] + separator_tokens
    used += before
    while end < len(lengths) and used + separator_tokens + lengths[end] <= target:
        used += separator_tokens + lengths[end]
        end += 1
    while start > 0 and used + separator_tokens + lengths[start - 1] <= target:
        start -= 1
        used += separator_tokens + lengths[start]
    return start, end


def answer_fraction(seed: int, question_id: str) -> float:
    """The seeded position of a question's answer paragraph: the same for a question at every T, independent of which
    other questions are built."""
    return random.Random(f"{seed}:{question_id}").random()


def make_example(article: Article, question: Question, start: int, end: int) -> tuple[Example, int]:
    """The question with the context `article.paragraphs[start:end]`, its answers shifted into it and checked;
    returns the example and the number of answers dropped because their text is not at their offset."""
    shift = sum(len(paragraph) + len(SEPARATOR) for paragraph in article.paragraphs[start : question.paragraph])
    context = SEPARATOR.join(article.paragraphs[start:end])
    answers, unplaced = [], 0
    for answer in question.answers:
        moved = Answer(answer.text, answer.start + shift)
        if answer.text and context[moved.start : moved.start + len(answer.text)] == answer.text:
            answers.append(moved)
        else:
            unplaced += 1
    return Example(article, question, start, end, context, tuple(answers)), unplaced
