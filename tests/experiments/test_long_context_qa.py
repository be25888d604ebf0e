import hashlib
import json
from pathlib import Path

import pytest
from conftest import REPO_ROOT, load_script

from blockbert_experiments.long_context import (
    SEPARATOR,
    LongContextConfig,
    build_long_context_sets,
    fill_window,
    read_article_halves,
    token_counts,
)
from blockbert_hf.train.qa import load_qa_dataset


SQUAD_SAMPLE = REPO_ROOT / "data" / "samples" / "squad_v1.1_dev_sample.json"
# With the test tokenizer the sample's paragraphs have 214-644 tokens and its articles about 7k. Its first half is one
# article, none of the default dev articles: no dev split unless a test asks for one.
CONFIG = dict(
    dev_titles=[],
    train_lengths=[512, 1024],
    sweep_lengths=[512, 1024, 2048, 8192],
    window_lengths=[512, 1024],
    sweep_questions=20,
    article_questions=30,
)
# A four-article file made of the sample's two articles and a renamed copy of each: first half [Sky, Jacksonville
# copy], second half [Jacksonville, Sky copy]; the Jacksonville copy is the dev article of `built_dev`.
DEV_TITLE = "Jacksonville,_Florida_(copy)"


def _build(tokenizer, output_dir, source=SQUAD_SAMPLE, **overrides):
    return build_long_context_sets(source, output_dir, tokenizer, LongContextConfig(**{**CONFIG, **overrides}))


def _read(path) -> list[dict]:
    """The questions of a written set, through the loader `examples/run_qa.py` uses."""
    return load_qa_dataset(str(path)).to_list()


@pytest.fixture(scope="module")
def built(tokenizer, tmp_path_factory):
    return _build(tokenizer, tmp_path_factory.mktemp("long_qa") / "sets")


@pytest.fixture(scope="module")
def halves():
    return read_article_halves(SQUAD_SAMPLE)


@pytest.fixture(scope="module")
def four_articles(tmp_path_factory) -> Path:
    data = json.loads(SQUAD_SAMPLE.read_text(encoding="utf-8"))
    sky, jacksonville = data["data"]
    copies = []
    for article in (jacksonville, sky):
        copy = json.loads(json.dumps(article))
        copy["title"] += "_(copy)"
        for paragraph in copy["paragraphs"]:
            for qa in paragraph["qas"]:
                qa["id"] += "-copy"
        copies.append(copy)
    data["data"] = [sky, copies[0], jacksonville, copies[1]]
    path = tmp_path_factory.mktemp("four_articles") / "four.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def built_dev(tokenizer, four_articles, tmp_path_factory):
    sets = ["train", "train_article", "dev", "window"]
    output_dir = tmp_path_factory.mktemp("long_qa_dev") / "sets"
    return _build(tokenizer, output_dir, source=four_articles, sets=sets, dev_titles=[DEV_TITLE])


def _set_names(built):
    return list(built.manifest["sets"])


def test_fill_window_stays_within_target_and_fills_to_one_paragraph_of_it():
    lengths = [30, 50, 20, 40, 60, 10, 35]
    for answer in range(len(lengths)):
        for target in range(lengths[answer], sum(lengths) + 10, 7):
            for fraction in (0.0, 0.3, 0.7, 0.999):
                start, end = fill_window(lengths, answer, target, fraction)
                used = sum(lengths[start:end])
                assert start <= answer < end and used <= target
                if (start, end) != (0, len(lengths)):
                    outside = [lengths[i] for i in (start - 1, end) if 0 <= i < len(lengths)]
                    assert target - used < max(outside)


def test_fill_window_position_follows_the_seeded_fraction():
    lengths = [10] * 21
    assert fill_window(lengths, 10, 100, 0.0) == (10, 20)  # all the room after the answer paragraph
    assert fill_window(lengths, 10, 100, 0.999) == (2, 12)  # almost all before it
    assert fill_window(lengths, 10, 100, 0.5) == (6, 16)  # 45 of the 90 tokens of room: 4 paragraphs
    assert fill_window(lengths, 1, 100, 0.999) == (0, 10)  # the article starts: the rest goes after
    assert fill_window([10, 10, 10], 1, 1000, 0.5) == (0, 3)  # shorter than the target: the whole article
    with pytest.raises(ValueError, match="more than the target"):
        fill_window([10, 50, 10], 1, 40, 0.5)


def test_build_is_deterministic_and_the_seed_matters(tokenizer, built, tmp_path):
    again = _build(tokenizer, tmp_path / "again")
    files = sorted(path.name for path in built.output_dir.iterdir())
    assert files == sorted(path.name for path in again.output_dir.iterdir())
    for name in files:
        assert (built.output_dir / name).read_bytes() == (again.output_dir / name).read_bytes(), name
    other_seed = _build(tokenizer, tmp_path / "seed1", seed=1)
    assert {row["id"] for row in _read(other_seed.output_dir / "sweep_512.json")} != {
        row["id"] for row in _read(built.output_dir / "sweep_512.json")
    }
    train = "train_1024.json"  # at 512 the sample's long paragraphs leave little room to place the answer paragraph
    assert (other_seed.output_dir / train).read_bytes() != (built.output_dir / train).read_bytes()


def test_every_answer_offset_is_correct_in_every_set(built):
    sets = "train_512 train_1024 train_article paragraph sweep_512 sweep_1024 sweep_2048 sweep_8192 window_512"
    assert _set_names(built) == [*sets.split(), "window_1024", "article"]
    for name, entry in built.manifest["sets"].items():
        rows = _read(built.output_dir / entry["file"])
        assert len(rows) == entry["questions"] == built.stats[name]["questions"], name
        assert entry["unplaced_answers"] == 0
        for row in rows:
            answers = row["answers"]
            assert answers["text"], row["id"]
            for text, start in zip(answers["text"], answers["answer_start"]):
                assert row["context"][start : start + len(text)] == text, (name, row["id"])


def test_sweep_asks_the_same_questions_at_every_length(built):
    sweeps = [_read(built.output_dir / f"sweep_{length}.json") for length in CONFIG["sweep_lengths"]]
    questions = [{row["id"]: (row["question"], row["answers"]["text"]) for row in rows} for rows in sweeps]
    assert len(questions[0]) == CONFIG["sweep_questions"]
    assert all(other == questions[0] for other in questions[1:])
    assert len({row["context"] for rows in sweeps for row in rows}) > len({row["context"] for row in sweeps[0]})


def test_filled_contexts_are_within_one_paragraph_of_the_target(tokenizer, built, halves):
    articles = [article for half in halves for article in half]
    whole = {article.title: SEPARATOR.join(article.paragraphs) for article in articles}
    # a filled context that is not the whole article lacks a neighbour that would not fit
    slack = {article.title: max(token_counts(article.paragraphs, tokenizer)) for article in articles}
    slack = {title: longest + token_counts([SEPARATOR], tokenizer)[0] for title, longest in slack.items()}
    for name, entry in built.manifest["sets"].items():
        target = entry["target_tokens"]
        if target is None or "window_" in name:  # the window sets: test_window_sets_fit_one_window_with_the_question
            continue
        rows = _read(built.output_dir / entry["file"])
        contexts = sorted({row["context"] for row in rows})
        lengths = dict(zip(contexts, token_counts(contexts, tokenizer)))
        for row in rows:
            length = lengths[row["context"]]
            assert length <= target, (name, row["id"])
            if row["context"] != whole[row["title"]]:
                assert target - length < slack[row["title"]], (name, row["id"])
        assert built.stats[name]["max"] <= target


def test_halves_are_article_disjoint(built, halves):
    first, second = ({article.title for article in half} for half in halves)
    assert first and second and not first & second
    titles = {
        name: {row["title"] for row in _read(built.output_dir / entry["file"])}
        for name, entry in built.manifest["sets"].items()
    }
    assert all(titles[name] <= first for name in titles if name.startswith("train_"))
    assert all(titles[name] <= second for name in titles if not name.startswith("train_"))
    assert built.manifest["halves"] == {
        "first": {"use": "training", "articles": [article.title for article in halves[0]]},
        "second": {"use": "test", "articles": [article.title for article in halves[1]]},
    }  # no dev half without dev titles
    assert built.manifest["config"]["dev_titles"] == []


def test_paragraph_and_article_sets_keep_the_source_contexts(built, halves):
    second = halves[1]
    paragraph_rows = _read(built.output_dir / "paragraph.json")
    originals = {
        question.id: (article.paragraphs[question.paragraph], question.answers)
        for article in second
        for question in article.questions
    }
    assert len(paragraph_rows) == len(originals)
    for row in paragraph_rows:
        context, answers = originals[row["id"]]
        assert row["context"] == context
        assert row["answers"]["answer_start"] == [answer.start for answer in answers]
    whole = {article.title: SEPARATOR.join(article.paragraphs) for article in second}
    article_rows = _read(built.output_dir / "article.json")
    assert len(article_rows) == CONFIG["article_questions"]
    assert all(row["context"] == whole[row["title"]] for row in article_rows)


@pytest.mark.parametrize("name", ["window_512", "window_1024", "dev_window_512", "dev_window_1024"])
def test_window_sets_fit_one_window_with_the_question(tokenizer, built, built_dev, four_articles, name):
    result, source = (built_dev, four_articles) if name.startswith("dev_") else (built, SQUAD_SAMPLE)
    entry = result.manifest["sets"][name]
    target = entry["target_tokens"]
    assert target == int(name.rsplit("_", 1)[1])
    assert entry["half"] == ("dev" if name.startswith("dev_") else "second")
    special_tokens = tokenizer.num_special_tokens_to_add(pair=True)
    assert result.manifest["special_tokens"] == special_tokens
    articles = {article.title: article for half in read_article_halves(source) for article in half}
    separator_tokens = token_counts([SEPARATOR], tokenizer)[0]
    longest = {title: max(token_counts(a.paragraphs, tokenizer)) + separator_tokens for title, a in articles.items()}
    rows = _read(result.output_dir / entry["file"])
    questions = token_counts([row["question"].lstrip() for row in rows], tokenizer)
    contexts = token_counts([row["context"] for row in rows], tokenizer)
    near = 0
    for row, question_tokens, context_tokens in zip(rows, questions, contexts):
        window = tokenizer(row["question"].lstrip(), row["context"], truncation=False, verbose=False)["input_ids"]
        assert len(window) <= target, (name, row["id"])
        budget = target - question_tokens - special_tokens
        assert context_tokens <= budget, (name, row["id"])
        near += budget - context_tokens < longest[row["title"]]  # a neighbouring paragraph did not fit
    assert rows and near >= 0.9 * len(rows), (name, near, len(rows))
    left_out = entry["left_out"].get("answer_paragraph_longer_than_target", [])
    half = [
        article
        for article in articles.values()
        if article.title in result.manifest["halves"][entry["half"]]["articles"]
    ]
    assert len(rows) + len(left_out) == sum(len(article.questions) for article in half)  # every question


def _titles_and_ids(result, name) -> tuple[set[str], set[str]]:
    rows = _read(result.output_dir / result.manifest["sets"][name]["file"])
    return {row["title"] for row in rows}, {row["id"] for row in rows}


def test_dev_articles_are_held_out_of_every_training_set_and_make_every_dev_set(built_dev, four_articles):
    manifest = built_dev.manifest
    sets = "train_512 train_1024 train_article dev_paragraph dev_window_512 dev_window_1024 dev_article window_512"
    assert list(manifest["sets"]) == [*sets.split(), "window_1024"]
    assert manifest["halves"] == {
        "first": {"use": "training", "articles": ["Sky_(United_Kingdom)"]},
        "dev": {"use": "recipe selection", "articles": [DEV_TITLE]},
        "second": {"use": "test", "articles": ["Jacksonville,_Florida", "Sky_(United_Kingdom)_(copy)"]},
    }
    assert manifest["config"]["dev_titles"] == [DEV_TITLE] and manifest["config"]["window_lengths"] == [512, 1024]
    first, _ = read_article_halves(four_articles)
    dev_ids = {question.id for article in first if article.title == DEV_TITLE for question in article.questions}
    assert len(dev_ids) == 96
    for name, entry in manifest["sets"].items():
        titles, ids = _titles_and_ids(built_dev, name)
        if name.startswith("train_"):
            assert entry["half"] == "first" and titles == {"Sky_(United_Kingdom)"} and not ids & dev_ids, name
        elif name.startswith("dev_"):
            assert entry["half"] == "dev" and titles == {DEV_TITLE} and ids <= dev_ids, name
            left_out = {id for ids in entry["left_out"].values() for id in ids}
            assert ids | left_out == dev_ids, name  # every dev question, or listed as left out
        else:
            assert entry["half"] == "second" and DEV_TITLE not in titles, name
    assert _titles_and_ids(built_dev, "dev_paragraph")[1] == _titles_and_ids(built_dev, "dev_article")[1] == dev_ids


def test_unknown_dev_titles_are_an_error_naming_them_and_the_first_half(tokenizer, tmp_path):
    with pytest.raises(ValueError) as error:
        _build(tokenizer, tmp_path / "out", dev_titles=["Geology", "Sky_(United_Kingdom)", "Black_Death"])
    message = str(error.value)
    assert "dev title(s) ['Geology', 'Black_Death'] are not articles of the first half" in message
    assert "whose titles are ['Sky_(United_Kingdom)']" in message and "--dev_titles none" in message
    assert list(tmp_path.iterdir()) == []
    assert LongContextConfig(dev_titles=["none"]).dev_titles == []  # `--dev_titles none`


def test_train_article_has_every_training_question_with_its_whole_article(built, built_dev, halves, four_articles):
    for result, source in ((built, SQUAD_SAMPLE), (built_dev, four_articles)):
        entry = result.manifest["sets"]["train_article"]
        assert entry["half"] == "first" and entry["target_tokens"] is None and entry["left_out"] == {}
        training = result.manifest["halves"]["first"]["articles"]
        articles = [article for article in read_article_halves(source)[0] if article.title in training]
        rows = _read(result.output_dir / entry["file"])
        assert {row["id"] for row in rows} == {question.id for article in articles for question in article.questions}
        whole = {article.title: SEPARATOR.join(article.paragraphs) for article in articles}
        assert all(row["context"] == whole[row["title"]] for row in rows)
        assert entry["contexts"] == len(articles)


def test_manifest_records_source_seed_and_sizes(built):
    manifest = built.manifest
    assert manifest["source"]["sha256"] == hashlib.sha256(SQUAD_SAMPLE.read_bytes()).hexdigest()
    assert manifest["seed"] == 0
    assert json.loads((built.output_dir / "manifest.json").read_text()) == manifest
    assert json.loads((built.output_dir / "stats.json").read_text()) == built.stats
    for entry in manifest["sets"].values():
        assert (built.output_dir / entry["file"]).stat().st_size == entry["bytes"]
    table = (built.output_dir / "stats.md").read_text()
    assert all(f"`{name}`" in table for name in manifest["sets"])


def test_questions_whose_paragraph_exceeds_the_target_are_left_out_and_reported(tokenizer, tmp_path):
    result = _build(tokenizer, tmp_path / "sets", sets=["train"], train_lengths=[300])
    entry = result.manifest["sets"]["train_300"]
    left_out = entry["left_out"]["answer_paragraph_longer_than_target"]
    assert left_out and entry["questions"] + len(left_out) == 108  # the first half's questions
    assert not {row["id"] for row in _read(result.output_dir / "train_300.json")} & set(left_out)


def test_answers_not_at_their_offset_are_counted_and_dropped(tokenizer, tmp_path):
    data = json.loads(SQUAD_SAMPLE.read_text(encoding="utf-8"))
    qas = data["data"][0]["paragraphs"][0]["qas"]
    qas[0]["answers"][0]["answer_start"] += 1  # one of three answers off
    for answer in qas[1]["answers"]:  # every answer off: the question cannot be placed
        answer["answer_start"] += 1
    source = tmp_path / "shifted.json"
    source.write_text(json.dumps(data), encoding="utf-8")
    result = _build(tokenizer, tmp_path / "sets", source=source, sets=["train"])
    entry = result.manifest["sets"]["train_512"]
    assert entry["unplaced_answers"] == 1 + len(qas[1]["answers"])
    assert entry["left_out"] == {"no_placeable_answer": [qas[1]["id"]]}
    assert entry["questions"] == 107


@pytest.mark.parametrize(
    ("overrides", "source", "error", "message"),
    [
        ({}, "missing.json.gz", FileNotFoundError, "does not exist"),
        ({"train_lengths": [100]}, None, ValueError, "smaller than the answer paragraph of every question"),
        ({"sweep_questions": 500}, None, ValueError, "asks for 500 questions"),
        ({"sets": ["train", "sweeps"]}, None, ValueError, "Unknown set name"),
        ({"sweep_lengths": [0]}, None, ValueError, "positive token counts"),
        ({"window_lengths": [-512]}, None, ValueError, "positive token counts"),
        ({"sets": ["window"], "window_lengths": [200]}, None, ValueError, r"its question and special tokens"),
        ({"dev_titles": ["Sky_(United_Kingdom)"]}, None, ValueError, "leaves none for training"),
    ],
)
def test_bad_inputs_raise_clear_errors_and_write_nothing(tokenizer, tmp_path, overrides, source, error, message):
    output_dir = tmp_path / "out"
    with pytest.raises(error, match=message):
        _build(tokenizer, output_dir, source=tmp_path / source if source else SQUAD_SAMPLE, **overrides)
    assert list(tmp_path.iterdir()) == []


def test_existing_output_is_kept_unless_overwrite(tokenizer, tmp_path):
    output_dir = tmp_path / "out"
    output_dir.mkdir()
    (output_dir / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="already exists"):
        _build(tokenizer, output_dir, sets=["paragraph"])
    assert [path.name for path in output_dir.iterdir()] == ["keep.txt"]
    config = LongContextConfig(sets=["paragraph"], dev_titles=[])
    build_long_context_sets(SQUAD_SAMPLE, output_dir, tokenizer, config, overwrite=True)
    written = sorted(path.name for path in output_dir.iterdir())
    assert written == ["manifest.json", "paragraph.json", "stats.json", "stats.md"]


def test_cli_builds_the_sets_from_a_tokenizer_folder(tokenizer, tmp_path, capsys):
    tokenizer.save_pretrained(tmp_path / "tokenizer")
    output_dir = tmp_path / "sets"
    load_script("experiments/build_long_context_qa.py").main(
        [
            "--squad_file", str(SQUAD_SAMPLE), "--tokenizer", str(tmp_path / "tokenizer"), "--output_dir",
            str(output_dir), "--sets", "paragraph", "sweep", "--sweep_lengths", "512", "1024", "--sweep_questions", "5",
            "--dev_titles", "none",
        ]
    )  # fmt: skip
    manifest = json.loads((output_dir / "manifest.json").read_text())
    assert list(manifest["sets"]) == ["paragraph", "sweep_512", "sweep_1024"]
    assert manifest["config"]["dev_titles"] == [] and "dev" not in manifest["halves"]
    assert manifest["sets"]["sweep_512"]["questions"] == 5
    assert "| `sweep_1024` | 1024 | 5 |" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({}, "already exists: choose another --output_dir or pass --overwrite_output_dir"),  # the output folder exists
        ({"--tokenizer": "{tmp}/no-tokenizer"}, "--tokenizer {tmp}/no-tokenizer does not exist"),
        ({"--squad_file": "{tmp}/missing.json.gz"}, "--squad_file {tmp}/missing.json.gz does not exist"),
        ({"--sets": "sweeps"}, "Unknown set name(s) ['sweeps']"),
        ({"--sets": "sweep", "--sweep_questions": "500"}, "asks for 500 questions"),
        # the default dev titles are articles of SQuAD v1.1 dev, not of the sample's first half
        ({"--dev_titles": None}, "dev title(s) ['Packet_switching', 'Black_Death', 'Geology'] are not articles"),
    ],
    ids=["existing output", "missing tokenizer", "missing squad file", "unknown set", "too many questions",
         "unknown dev title"],
)  # fmt: skip
def test_cli_user_errors_are_one_line_and_exit_2_before_writing(tokenizer, tmp_path, capsys, changes, message):
    tokenizer.save_pretrained(tmp_path / "tokenizer")
    output_dir = tmp_path / "sets"
    arguments = {
        "--squad_file": str(SQUAD_SAMPLE), "--tokenizer": str(tmp_path / "tokenizer"), "--output_dir": str(output_dir),
        "--sets": "paragraph", "--dev_titles": "none",
    }  # fmt: skip
    for option, value in changes.items():
        if value is None:
            del arguments[option]
        else:
            arguments[option] = value.format(tmp=tmp_path)
    if not changes:
        output_dir.mkdir()
        (output_dir / "keep.txt").write_text("mine")
    with pytest.raises(SystemExit) as exit_info:
        load_script("experiments/build_long_context_qa.py").main([word for pair in arguments.items() for word in pair])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert message.format(tmp=tmp_path) in error and "Traceback" not in error
    assert len(error.strip().splitlines()) == 1 and "repo id" not in error.lower()
    assert not output_dir.exists() or [path.name for path in output_dir.iterdir()] == ["keep.txt"]
