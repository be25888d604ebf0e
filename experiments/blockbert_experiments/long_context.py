"""Long-context QA sets built from one SQuAD-format file: each question's answer paragraph filled with neighbouring
paragraphs of its article up to a token budget T, so that context length is what varies. A filled context is at most T
tokens and, unless it is the whole article, less than one paragraph short of T.

The articles are split into halves: the first half (less the dev articles, `--dev_titles`) gives the training sets
`train_<N>` and `train_article`, the dev articles `dev_paragraph`, `dev_window_<T>` and `dev_article`, the second half
the test sets `paragraph`, `sweep_<T>`, `window_<T>` and `article`. How contexts are filled and what each set holds:
docs/qa_long_context_data.md; the command line: `experiments/build_long_context_qa.py`.
"""

import json
import logging
import os
import random
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from transformers import PreTrainedTokenizerBase

from blockbert_benchmarks.measuring.machine import recorded_path
from blockbert_hf.saving import (
    atomic_directory,
    open_text,
    sha256_of_file,
    write_file_atomically,
    write_json_atomically,
)
from blockbert_hf.train.model_card import markdown_table
from blockbert_hf.train.qa.data import read_squad_json, split_squad_articles

from . import option


logger = logging.getLogger(__name__)

SEPARATOR = "\n"  # between joined paragraphs; the answer offsets account for it

SET_FAMILIES = ("train", "train_article", "dev", "paragraph", "sweep", "window", "article")
# Three first-half articles of SQuAD v1.1 dev of median size (106-116 questions, about 4,000 tokens each)
DEFAULT_DEV_TITLES = ("Packet_switching", "Black_Death", "Geology")
NO_DEV_SPLIT = "none"  # `--dev_titles none`: the command line cannot give an empty list


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
    """One question of a built set: its context is consecutive paragraphs of its article joined with `SEPARATOR`."""

    article: Article
    question: Question
    context: str
    answers: tuple[Answer, ...]


def read_articles(path: str | os.PathLike) -> list[Article]:
    """The articles of a SQuAD-format `.json(.gz)` file, paragraph by paragraph with their questions."""
    read_squad_json(path)  # raises a clear error for records that lack SQuAD fields
    with open_text(path) as handle:
        data = json.load(handle)
    articles = []
    for article in data["data"]:
        questions = []
        for index, paragraph in enumerate(article["paragraphs"]):
            for qa in paragraph["qas"]:
                given = [] if qa.get("is_impossible") else qa["answers"]
                answers = tuple(Answer(answer["text"], int(answer["answer_start"])) for answer in given)
                questions.append(Question(str(qa["id"]), qa["question"], index, answers))
        paragraphs = tuple(paragraph["context"] for paragraph in article["paragraphs"])
        articles.append(Article(article.get("title", ""), paragraphs, tuple(questions)))
    return articles


def token_counts(texts: Sequence[str], tokenizer: PreTrainedTokenizerBase, batch_size: int = 64) -> list[int]:
    """Tokens of each text alone (no special tokens)."""
    counts = []
    for begin in range(0, len(texts), batch_size):
        batch = list(texts[begin : begin + batch_size])
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
    return Example(article, question, context, tuple(answers)), unplaced


@dataclass
class LongContextConfig:
    """What `build_long_context_sets` builds (lengths are context tokens under the given tokenizer)."""

    sets: list[str] = option(
        list(SET_FAMILIES),
        "Which set families to build, any of: train (`train_<N>`), train_article, dev (`dev_paragraph`, "
        "`dev_window_<T>`, `dev_article`), paragraph, sweep (`sweep_<T>`), window (`window_<T>`), article.",
    )
    dev_titles: list[str] = option(
        list(DEFAULT_DEV_TITLES),
        "Titles of first-half articles held out of every training set as the dev half (recipe selection; by default "
        "three of median size, about 110 questions and 4,000 tokens each), even when `dev` is not in --sets. `none`: "
        "no dev split.",
    )
    train_lengths: list[int] = option([512, 1024, 2048], "N of each `train_<N>` set (contexts filled to N tokens).")
    sweep_lengths: list[int] = option(
        [512, 1024, 2048, 4096, 8192], "T of each `sweep_<T>` test set (the same questions, contexts filled to T)."
    )
    window_lengths: list[int] = option(
        [512], "T of each `window_<T>` and `dev_window_<T>` set (question and context fill one window of T tokens)."
    )
    sweep_questions: int = option(600, "Questions in every sweep set (seeded choice).")
    article_questions: int = option(1000, "Questions in the `article` set (seeded choice, whole article as context).")
    seed: int = option(0, "Seed of the question samples and of the answer positions.")

    def __post_init__(self):
        unknown = sorted(set(self.sets) - set(SET_FAMILIES))
        if unknown or not self.sets:
            raise ValueError(f"Unknown set name(s) {unknown or self.sets}: choose among {', '.join(SET_FAMILIES)}.")
        self.dev_titles = [] if list(self.dev_titles) == [NO_DEV_SPLIT] else list(dict.fromkeys(self.dev_titles))
        for name in ("train_lengths", "sweep_lengths", "window_lengths"):
            lengths = getattr(self, name)
            if not lengths or any(length <= 0 for length in lengths):
                raise ValueError(f"{name} must be one or more positive token counts, got {lengths}.")
            setattr(self, name, sorted(set(lengths)))
        for name in ("sweep_questions", "article_questions"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}.")


@dataclass
class LongContextSet:
    name: str
    half: str  # "first" (training), "dev" (recipe selection) or "second" (test)
    target_tokens: int | None  # T of a filled or window set; None for the paragraph and article sets
    examples: list[Example]
    unplaced_answers: int = 0  # answers whose text is not at their offset (dropped)
    left_out: dict[str, list[str]] = field(default_factory=dict)  # reason -> question ids


def read_article_halves(source: str | os.PathLike) -> tuple[list[Article], list[Article]]:
    """The first and second half of the articles of a SQuAD-format file, as `split_squad_articles` splits them."""
    if not Path(source).is_file():
        raise FileNotFoundError(
            f"--squad_file {source} does not exist or is not a file: pass a SQuAD-format .json(.gz) file, e.g. SQuAD "
            "v1.1 dev (dev-v1.1.json.gz, CC BY-SA 4.0)."
        )
    with tempfile.TemporaryDirectory() as folder:
        return tuple(read_articles(path) for path in split_squad_articles(source, folder))


def hold_out_dev_articles(first: list[Article], dev_titles: Sequence[str]) -> tuple[list[Article], list[Article]]:
    """The first half without the articles that `dev_titles` names, and those articles (both in first-half order).
    Raises a ValueError when a title is not in the first half."""
    titles = [article.title for article in first]
    unknown = [title for title in dict.fromkeys(dev_titles) if title not in titles]
    if unknown:
        raise ValueError(
            f"dev title(s) {unknown} are not articles of the first half, whose titles are {titles}: name dev "
            f"articles among those (--dev_titles), or pass dev_titles=[] (--dev_titles {NO_DEV_SPLIT}) for no dev "
            "split."
        )
    held_out = set(dev_titles)
    if held_out and held_out >= set(titles):
        raise ValueError(
            f"dev title(s) {list(dev_titles)} name every article of the first half, which leaves none for training: "
            "keep at least one first-half article out of --dev_titles."
        )
    return (
        [article for article in first if article.title not in held_out],
        [article for article in first if article.title in held_out],
    )


_Half = list[tuple[Article, list[int]]]  # a half's articles, each with the token counts of its paragraphs


def _tokenized_half(articles: list[Article], tokenizer: PreTrainedTokenizerBase) -> _Half:
    counts = iter(token_counts([paragraph for article in articles for paragraph in article.paragraphs], tokenizer))
    return [(article, [next(counts) for _ in article.paragraphs]) for article in articles]


def _build_set(
    name: str,
    half_name: str,
    half: _Half,
    *,
    window: str,
    target: int | None = None,
    seed: int = 0,
    separator_tokens: int = 0,
    question_ids: set[str] | None = None,
    reserved: dict[str, int] | None = None,
) -> LongContextSet:
    """`window`: "paragraph" (the answer paragraph), "filled" (to `target` tokens) or "article" (all of it).
    `reserved`: for a filled set, the tokens each question's window holds besides the context (its question and the
    special tokens); its context is filled to `target` less those."""
    built = LongContextSet(name, half_name, target, [])
    too_long, unanswerable = [], []
    for article, lengths in half:
        for question in article.questions:
            if question_ids is not None and question.id not in question_ids:
                continue
            if window == "filled":
                budget = target - (reserved[question.id] if reserved is not None else 0)
                if lengths[question.paragraph] > budget:
                    too_long.append(question.id)
                    continue
                # The answer paragraph's seeded position: the same at every T, whichever other questions are built.
                fraction = random.Random(f"{seed}:{question.id}").random()
                start, end = fill_window(lengths, question.paragraph, budget, fraction, separator_tokens)
            elif window == "article":
                start, end = 0, len(article.paragraphs)
            else:
                start, end = question.paragraph, question.paragraph + 1
            example, unplaced = make_example(article, question, start, end)
            built.unplaced_answers += unplaced
            if example.answers:
                built.examples.append(example)
            else:
                unanswerable.append(question.id)
    reasons = {"answer_paragraph_longer_than_target": too_long, "no_placeable_answer": unanswerable}
    built.left_out = {reason: ids for reason, ids in reasons.items() if ids}
    if not built.examples:
        raise ValueError(f"Set {name!r} would have no questions: " + _why_empty(half, target, reserved, too_long))
    return built


def _why_empty(half: _Half, target: int | None, reserved: dict[str, int] | None, too_long: list[str]) -> str:
    if not too_long:
        return "no question has an answer whose text is at its offset in the context."
    if reserved is None:
        shortest = min(lengths[q.paragraph] for a, lengths in half for q in a.questions)
        return (
            f"T = {target} is smaller than the answer paragraph of every question (the shortest has {shortest} "
            f"tokens); use T >= {shortest} (--train_lengths)."
        )
    shortest = min(lengths[q.paragraph] + reserved[q.id] for a, lengths in half for q in a.questions)
    return (
        f"T = {target} is smaller than the answer paragraph of every question with its question and special tokens "
        f"(the shortest window needs {shortest} tokens); use T >= {shortest} (--window_lengths)."
    )


def _sample_ids(half: _Half, size: int, seed: int, what: str, max_paragraph_tokens: int | None = None) -> set[str]:
    """A seeded sample of `size` question ids of the half that have a placeable answer (and whose answer paragraph
    has at most `max_paragraph_tokens`)."""
    candidates = [
        question.id
        for article, lengths in half
        for question in article.questions
        if make_example(article, question, question.paragraph, question.paragraph + 1)[0].answers
        and (max_paragraph_tokens is None or lengths[question.paragraph] <= max_paragraph_tokens)
    ]
    if len(candidates) < size:
        fits = "" if max_paragraph_tokens is None else f" whose answer paragraph fits in {max_paragraph_tokens} tokens"
        raise ValueError(
            f"The {what} set asks for {size} questions but the second half has only {len(candidates)} answerable "
            f"question(s){fits}: ask for at most {len(candidates)}"
            + (" or use a larger smallest T." if max_paragraph_tokens is not None else ".")
        )
    return set(random.Random(f"{seed}:{what}").sample(candidates, size))


def _window_reserved(half: _Half, tokenizer: PreTrainedTokenizerBase) -> dict[str, int]:
    """Per question id, the tokens of its window that are not context: the question (after `.lstrip()`, as the
    windows take it) and the special tokens of a pair."""
    questions = [question for article, _ in half for question in article.questions]
    special_tokens = tokenizer.num_special_tokens_to_add(pair=True)
    counts = token_counts([question.question.lstrip() for question in questions], tokenizer)
    return {question.id: count + special_tokens for question, count in zip(questions, counts)}


def build_sets(
    first: list[Article], second: list[Article], tokenizer: PreTrainedTokenizerBase, config: LongContextConfig
) -> list[LongContextSet]:
    """The sets `config` asks for, from the first half (`first`; its articles named by `config.dev_titles` are the
    dev half, the others the training half) and the test half (`second`); nothing is written."""
    training, dev_articles = hold_out_dev_articles(first, config.dev_titles)
    separator_tokens = token_counts([SEPARATOR], tokenizer)[0]
    families = set(config.sets)
    train = _tokenized_half(training, tokenizer) if families & {"train", "train_article"} else None
    dev = _tokenized_half(dev_articles, tokenizer) if "dev" in families and dev_articles else None
    test = _tokenized_half(second, tokenizer) if families & {"paragraph", "sweep", "window", "article"} else None
    sets = []
    filled = dict(window="filled", seed=config.seed, separator_tokens=separator_tokens)
    if "train" in config.sets:
        for length in config.train_lengths:
            sets.append(_build_set(f"train_{length}", "first", train, target=length, **filled))
    if "train_article" in config.sets:
        sets.append(_build_set("train_article", "first", train, window="article"))
    if dev is not None:
        sets.append(_build_set("dev_paragraph", "dev", dev, window="paragraph"))
        reserved = _window_reserved(dev, tokenizer)
        for length in config.window_lengths:
            sets.append(_build_set(f"dev_window_{length}", "dev", dev, target=length, reserved=reserved, **filled))
        sets.append(_build_set("dev_article", "dev", dev, window="article"))
    if "paragraph" in config.sets:
        sets.append(_build_set("paragraph", "second", test, window="paragraph"))
    if "sweep" in config.sets:
        smallest = config.sweep_lengths[0]
        ids = _sample_ids(test, config.sweep_questions, config.seed, "sweep", max_paragraph_tokens=smallest)
        for length in config.sweep_lengths:
            sets.append(_build_set(f"sweep_{length}", "second", test, target=length, question_ids=ids, **filled))
    if "window" in config.sets:
        reserved = _window_reserved(test, tokenizer)
        for length in config.window_lengths:
            sets.append(_build_set(f"window_{length}", "second", test, target=length, reserved=reserved, **filled))
    if "article" in config.sets:
        ids = _sample_ids(test, config.article_questions, config.seed, "article")
        sets.append(_build_set("article", "second", test, window="article", question_ids=ids))
    return sets


def squad_json(built: LongContextSet) -> dict:
    """The set in SQuAD format; questions that share a context share one paragraph record."""
    articles: dict[str, dict[str, list]] = {}  # title -> context -> its questions
    for example in built.examples:
        answers = [{"text": answer.text, "answer_start": answer.start} for answer in example.answers]
        row = {"id": example.question.id, "question": example.question.question, "answers": answers}
        articles.setdefault(example.article.title, {}).setdefault(example.context, []).append(row)
    return {
        "version": "1.1",
        "data": [
            {"title": title, "paragraphs": [{"context": context, "qas": qas} for context, qas in paragraphs.items()]}
            for title, paragraphs in articles.items()
        ],
    }


def length_stats(sets: list[LongContextSet], tokenizer: PreTrainedTokenizerBase) -> dict[str, dict]:
    """Per set: questions, articles, and the distribution over its questions of the context's token count."""
    contexts = sorted({example.context for built in sets for example in built.examples})
    counts = dict(zip(contexts, token_counts(contexts, tokenizer)))
    stats = {}
    for built in sets:
        lengths = np.array([counts[example.context] for example in built.examples])
        percentiles = zip(("median", "p10", "p90"), np.percentile(lengths, [50, 10, 90]))
        stats[built.name] = {
            "target_tokens": built.target_tokens,
            "questions": len(built.examples),
            "articles": len({example.article.title for example in built.examples}),
            **{name: round(float(value), 1) for name, value in percentiles},
            "max": int(lengths.max()),
        }
    return stats


def stats_table(stats: dict[str, dict]) -> str:
    """The stats as a markdown table."""
    rows = [
        [f"`{name}`", "-" if row["target_tokens"] is None else row["target_tokens"], f"{row['questions']:,}"]
        + [row["articles"], *(f"{row[key]:,.0f}" for key in ("median", "p10", "p90")), f"{row['max']:,}"]
        for name, row in stats.items()
    ]
    return markdown_table(["set", "T", "questions", "articles", "median", "p10", "p90", "max"], rows)


@dataclass(frozen=True)
class LongContextBuild:
    """What `build_long_context_sets` wrote: the contents of `manifest.json` and `stats.json`."""

    output_dir: Path
    manifest: dict
    stats: dict


def build_long_context_sets(
    source: str | os.PathLike,
    output_dir: str | os.PathLike,
    tokenizer: PreTrainedTokenizerBase,
    config: LongContextConfig | None = None,
    overwrite: bool = False,
) -> LongContextBuild:
    """Writes, atomically, one SQuAD-format `<set>.json` per set `config` asks for, `manifest.json`, `stats.json` and
    `stats.md` into `output_dir`; raises before writing anything when an input is bad."""
    config = config or LongContextConfig()
    if Path(output_dir).exists() and not overwrite:
        raise FileExistsError(
            f"{output_dir} already exists: choose another output folder or pass overwrite=True "
            "(--overwrite_output_dir on the command line)."
        )
    first, second = read_article_halves(source)
    sets = build_sets(first, second, tokenizer, config)
    training, dev = hold_out_dev_articles(first, config.dev_titles)
    stats = length_stats(sets, tokenizer)
    files = {built.name: json.dumps(squad_json(built), ensure_ascii=False) + "\n" for built in sets}
    tokenizer_path = tokenizer.name_or_path
    manifest = {
        "source": {"file": Path(source).name, "sha256": sha256_of_file(source)},
        "seed": config.seed,
        # a local folder as `recorded_path` records it (an installed model by its package), a Hub id as it is
        "tokenizer": recorded_path(tokenizer_path) if Path(tokenizer_path).exists() else tokenizer_path,
        "separator": SEPARATOR,
        # what a window holds besides question and context (the window sets leave room for it)
        "special_tokens": tokenizer.num_special_tokens_to_add(pair=True),
        "config": {key: value for key, value in vars(config).items() if key not in ("sets", "seed")},
        "halves": {
            "first": {"use": "training", "articles": [article.title for article in training]},
            **({"dev": {"use": "recipe selection", "articles": [article.title for article in dev]}} if dev else {}),
            "second": {"use": "test", "articles": [article.title for article in second]},
        },
        "sets": {
            built.name: {
                "file": f"{built.name}.json",
                "half": built.half,
                "target_tokens": built.target_tokens,
                "questions": len(built.examples),
                "contexts": len({example.context for example in built.examples}),
                "bytes": len(files[built.name].encode("utf-8")),
                "unplaced_answers": built.unplaced_answers,
                "left_out": built.left_out,
            }
            for built in sets
        },
    }
    with atomic_directory(output_dir) as staging:
        for name, text in files.items():
            write_file_atomically(staging / f"{name}.json", text)
        write_json_atomically(staging / "manifest.json", manifest)
        write_json_atomically(staging / "stats.json", stats)
        write_file_atomically(staging / "stats.md", stats_table(stats))
    for built in sets:
        if built.unplaced_answers:
            logger.warning(f"{built.name}: {built.unplaced_answers} answer(s) not at their source offset, dropped.")
        for reason, ids in built.left_out.items():
            why = reason.replace("_", " ")
            logger.warning(f"{built.name}: {len(ids)} question(s) left out: {why} (e.g. {ids[:3]}).")
    return LongContextBuild(Path(output_dir), manifest, stats)
