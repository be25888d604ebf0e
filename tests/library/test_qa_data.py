"""QA data: errors that name the file, line and what is wrong; files whose answers are not in their contexts; and the
training/evaluation windows, which are the pipeline's own."""

import ast
import json
import logging

import datasets
import numpy as np
import pytest
from conftest import REPO_ROOT, tiny_config

from blockbert_hf import BlockBertForQuestionAnswering
from blockbert_hf.model.pipeline_question_answering import ExtractiveQuestionAnsweringPipeline
from blockbert_hf.saving import save_atomically
from blockbert_hf.tokenization import match_tokenizer_to_config
from blockbert_hf.train.qa import (
    QARunConfig,
    check_qa_dataset,
    load_qa_dataset,
    postprocess_qa_predictions,
    prepare_eval_features,
    read_mrqa_jsonl,
    read_squad_json,
    realign_answers,
    run_qa,
)


SQUAD_V1 = REPO_ROOT / "data" / "samples" / "squad_v1.1_dev_sample.json"
CONTEXT = "The Naktong River runs south. Its perimeter was held in 1950."
HEADER = json.dumps({"header": {"dataset": "SQuAD", "split": "dev"}})
GOOD_RECORD = json.dumps(
    {
        "context": CONTEXT,
        "qas": [
            {
                "qid": "q1",
                "question": "Which river?",
                "detected_answers": [{"text": "Naktong River", "char_spans": [[4, 16]]}],
            }
        ],
    }
)


def squad_file(path, answers_by_id: dict[str, dict]):
    """A one-paragraph SQuAD file over `CONTEXT` with one question per id."""
    qas = [
        {"id": qid, "question": "What?", "answers": [{"text": a["text"], "answer_start": a["start"]}]}
        for qid, a in answers_by_id.items()
    ]
    article = {"title": "T", "paragraphs": [{"context": CONTEXT, "qas": qas}]}
    path.write_text(json.dumps({"version": "1.1", "data": [article]}))
    return path


# ---------------------------------------------------------------------------------------------------------------------
# Malformed files: the error names the file, the line and what is wrong
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad_line, what",
    [
        ('{"context": "Some text.", "qas": [', r"invalid JSON at column \d+"),
        (json.dumps({"qas": []}), "not an MRQA record, missing field 'context'"),
        (json.dumps({"context": "Text.", "qas": [{"qid": "x"}]}), "not an MRQA record, missing field 'question'"),
        ("[1, 2]", r"not an MRQA record \(a JSON list\)"),
        ("5", r"not an MRQA record \(a JSON int\)"),
    ],
)
def test_malformed_jsonl_lines_name_the_file_the_line_and_the_fault(tmp_path, bad_line, what):
    path = tmp_path / "broken.jsonl"
    path.write_text("\n".join([HEADER, GOOD_RECORD, "", bad_line, GOOD_RECORD]) + "\n")
    with pytest.raises(ValueError, match=rf"broken\.jsonl, line 4: {what}"):
        read_mrqa_jsonl(path)


def test_malformed_or_non_utf8_json_files_are_named(tmp_path):
    truncated = tmp_path / "truncated.json"
    truncated.write_text(SQUAD_V1.read_text()[:5000])
    with pytest.raises(ValueError, match=r"truncated\.json: invalid JSON at line \d+, column \d+"):
        load_qa_dataset(str(truncated))
    latin1 = tmp_path / "latin1.jsonl"
    latin1.write_bytes((HEADER + "\n" + GOOD_RECORD.replace("Naktong", "Nakt\u00f6ng") + "\n").encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin1\.jsonl is not UTF-8 text.*re-encode it as UTF-8"):
        load_qa_dataset(str(latin1))


def test_a_file_without_questions_is_an_error(tmp_path):
    (tmp_path / "empty.json").write_text(json.dumps({"version": "1.1", "data": []}))
    with pytest.raises(ValueError, match=r"empty\.json has no questions"):
        load_qa_dataset(str(tmp_path / "empty.json"))


# ---------------------------------------------------------------------------------------------------------------------
# Any dataset with the SQuAD columns
# ---------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def squad_rows():
    return read_squad_json(SQUAD_V1).select(range(12))


def test_rows_exported_by_datasets_load_as_they_were_saved(squad_rows, tmp_path):
    """`Dataset.save_to_disk` folders (of a Dataset, of a DatasetDict's split), `Dataset.to_json` exports (JSON
    lines, under either suffix, `title` left out) and Parquet files give back the rows, extra columns dropped."""
    squad_rows.save_to_disk(str(tmp_path / "saved"))
    datasets.DatasetDict(train=squad_rows.select(range(4)), validation=squad_rows).save_to_disk(str(tmp_path / "dict"))
    with_extra = squad_rows.add_column("source", ["web"] * len(squad_rows))
    with_extra.remove_columns("title").to_json(str(tmp_path / "rows.json"))
    squad_rows.to_json(str(tmp_path / "rows.jsonl.gz"), compression="gzip")
    squad_rows.to_parquet(str(tmp_path / "rows.parquet"))
    for name in ("saved", "dict", "rows.json", "rows.jsonl.gz", "rows.parquet"):
        loaded = load_qa_dataset(str(tmp_path / name))
        assert loaded.features == squad_rows.features, name
        assert loaded["answers"] == squad_rows["answers"] and loaded["id"] == squad_rows["id"], name
    assert set(load_qa_dataset(str(tmp_path / "rows.json"))["title"]) == {""}
    assert len(load_qa_dataset(str(tmp_path / "dict"), split="train")) == 4
    with pytest.raises(ValueError, match=r"has no split 'test'; it has \['train', 'validation'\]"):
        load_qa_dataset(str(tmp_path / "dict"), split="test")


@pytest.mark.parametrize(
    ("dropped", "named"), [(["answers"], r"\['answers'\]"), (["context", "question"], r"\['question', 'context'\]")]
)
def test_rows_without_a_squad_column_are_refused_naming_the_missing_columns(squad_rows, tmp_path, dropped, named):
    squad_rows.remove_columns(dropped).to_json(str(tmp_path / "rows.jsonl"))
    squad_rows.remove_columns(dropped).save_to_disk(str(tmp_path / "saved"))
    for name in ("rows.jsonl", "saved"):
        with pytest.raises(ValueError, match=rf"{name} lacks the SQuAD column\(s\) {named}"):
            load_qa_dataset(str(tmp_path / name))


def test_hub_ids_go_to_datasets_and_mrqa_rows_are_converted_and_filtered_by_subset(monkeypatch):
    """Any Hub id (and the short names of earlier versions) goes to `datasets.load_dataset` with its configuration
    and split; rows in the MRQA schema become SQuAD rows, `mrqa_subset` keeping one subset."""
    mrqa = datasets.Dataset.from_list(
        [
            {"subset": subset, "context": CONTEXT, "qid": qid, "question": "Which river?",
             "detected_answers": {"text": ["Naktong River"], "char_spans": [{"start": [4], "end": [16]}]}}
            for subset, qid in (("SQuAD", "q1"), ("NewsQA", "q2"), ("NewsQA", "q3"))
        ]
    )  # fmt: skip
    calls = []

    def load_dataset(name, config_name=None, split=None):
        calls.append((name, config_name, split))
        return mrqa

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    rows = load_qa_dataset("someone/my-mrqa", split="validation", config_name="default", mrqa_subset="NewsQA")
    assert rows["id"] == ["q2", "q3"] and rows["title"] == ["NewsQA", "NewsQA"]
    assert rows[0]["answers"] == {"text": ["Naktong River"], "answer_start": [4]}
    load_qa_dataset("mrqa", split="train")
    assert calls == [("someone/my-mrqa", "default", "validation"), ("mrqa-workshop/mrqa", None, "train")]
    with pytest.raises(ValueError, match=r"has no MRQA subset 'BioASQ'; it has \['NewsQA', 'SQuAD'\]"):
        load_qa_dataset("someone/my-mrqa", mrqa_subset="BioASQ")


# ---------------------------------------------------------------------------------------------------------------------
# Answers that are not in their context
# ---------------------------------------------------------------------------------------------------------------------


def mojibake(text: str) -> str:
    """UTF-8 text decoded as Latin-1, as when a file is written in one encoding and read in the other."""
    return text.encode("utf-8").decode("latin-1")


def test_a_file_in_which_no_answer_is_in_its_context_is_an_error(tmp_path):
    path = squad_file(
        tmp_path / "wrong.json",
        {"q1": {"text": mojibake("Naktong River’s"), "start": 4}, "q2": {"text": "1951", "start": 56}},
    )
    with pytest.raises(ValueError) as error:
        load_qa_dataset(str(path))
    message = str(error.value)
    assert str(path) in message
    assert "none of the 2 answered question(s)" in message and "['q1', 'q2']" in message
    assert "answer_start" in message and "encoding" in message


def test_answers_missing_from_some_contexts_are_counted_in_a_warning_and_dropped(tmp_path, caplog):
    path = squad_file(
        tmp_path / "partly.json",
        {
            "good": {"text": "Naktong River", "start": 4},
            "shifted": {"text": "1950", "start": 50},
            "lost": {"text": "armada", "start": 0},
        },
    )
    with caplog.at_level(logging.WARNING, logger="blockbert_hf.train.qa.data"):
        dataset = load_qa_dataset(str(path))
    assert len(dataset) == 3
    assert f"{path}: 1 of 3 answered question(s) have no answer" in caplog.text and "['lost']" in caplog.text
    fixed, counts = realign_answers(dataset)
    assert fixed["id"] == ["good", "shifted"]
    assert counts == {"realigned": 1, "dropped": 1, "removed_questions": 1}


def test_realign_answers_refuses_to_drop_every_answered_question():
    dataset = datasets.Dataset.from_dict(
        {
            "id": ["lost", "impossible"],
            "question": ["What?"] * 2,
            "context": [CONTEXT] * 2,
            "answers": [{"text": ["armada"], "answer_start": [0]}, {"text": [], "answer_start": []}],
        }
    )
    with pytest.raises(ValueError, match=r"train\.json: none of the 1 answered question\(s\).*\['lost'\]"):
        realign_answers(dataset, "train.json")
    with pytest.raises(ValueError, match="none of the 1 answered"):
        check_qa_dataset(dataset, "train.json")


def test_run_qa_says_why_before_training_on_a_file_whose_answers_are_not_in_their_contexts(tmp_path, tokenizer):
    """End to end: such a file is refused with the reason before any training, rather than leaving no training window
    (the sampler's `num_samples = 0`)."""
    config = tiny_config(vocab_size=len(tokenizer))
    match_tokenizer_to_config(tokenizer, config)
    model_dir = save_atomically(
        tmp_path / "model", BlockBertForQuestionAnswering(config).save_pretrained, tokenizer.save_pretrained
    )
    path = squad_file(tmp_path / "train.json", {"q1": {"text": mojibake("Naktong Rivér"), "start": 4}})
    run = QARunConfig(
        model_name_or_path=str(model_dir),
        output_dir=str(tmp_path / "out"),
        train_file=str(path),
        do_train=True,
        doc_stride=16,
    )
    with pytest.raises(ValueError, match=r"train\.json: none of the 1 answered question\(s\)"):
        run_qa(run)


# ---------------------------------------------------------------------------------------------------------------------
# Windows: one implementation, in the pipeline file
# ---------------------------------------------------------------------------------------------------------------------


def test_evaluation_windows_are_the_pipelines_windows(tokenizer):
    config = tiny_config(vocab_size=len(tokenizer))
    match_tokenizer_to_config(tokenizer, config)
    qa = ExtractiveQuestionAnsweringPipeline(model=BlockBertForQuestionAnswering(config).eval(), tokenizer=tokenizer)
    examples = read_squad_json(SQUAD_V1).select(range(0, 200, 40))
    features = prepare_eval_features(examples[:], tokenizer, max_seq_length=64, doc_stride=16)
    for example in examples:
        windows = list(qa.preprocess(example, doc_stride=16, max_seq_len=64))
        mine = [index for index, example_id in enumerate(features["example_id"]) if example_id == example["id"]]
        assert len(mine) == len(windows) > 1
        for index, window in zip(mine, windows):
            assert window["input_ids"][0].tolist() == features["input_ids"][index]
            assert window["window"].offsets == features["offset_mapping"][index]
            assert window["window"].null_index == features["null_index"][index]
            assert window["window"].block_null_indices == features["block_null_indices"][index]


def test_training_features_import_the_window_logic_from_the_model_folder_code():
    """The window code is copied into saved model folders: the dependency goes from `train.qa` to it, never the other
    way."""
    features_file = REPO_ROOT / "src" / "blockbert_hf" / "train" / "qa" / "features.py"
    imported = {
        alias.name
        for node in ast.walk(ast.parse(features_file.read_text()))
        if isinstance(node, ast.ImportFrom) and node.module == "model.question_answering_windows"
        for alias in node.names
    }
    assert "tokenize_windows" in imported
    assert "tokenizer(" not in features_file.read_text()  # no second window tokenization


def test_evaluation_predictions_are_whole_characters_and_never_whitespace():
    """Evaluation decodes spans with the pipeline's `rank_answers`: a token ending before a combining accent still
    predicts the whole letter, and a whitespace-only best span gives way to the next best."""
    context = "Jose\u0301\n\nMarti"
    examples = datasets.Dataset.from_dict({"id": ["q1"], "context": [context]})
    offsets = [None, (0, 4), (4, 5), (5, 7), (7, 12), None]
    features = datasets.Dataset.from_dict(
        {"example_id": ["q1"] * 2, "null_index": [0, 0], "offset_mapping": [offsets] * 2}
    )
    accent = np.array([-9.0, 5.0, -9.0, -9.0, 0.0, -9.0])
    blank = np.array([-9.0, 0.0, -9.0, 5.0, 1.0, -9.0])
    for logits, wanted in ((accent, "Jose\u0301"), (blank, "Marti")):
        predictions, _ = postprocess_qa_predictions(
            examples, features, [logits] * 2, [logits] * 2, version_2=False, max_answer_length=1
        )
        assert predictions == [{"id": "q1", "prediction_text": wanted}]


def test_evaluation_scores_a_span_against_the_null_token_of_its_own_block():
    """Evaluation reads each window's `block_null_indices` as the pipeline does: the second block's span ("delta")
    loses to its own block's high null score, so the answer of the other window ("gamma") wins. Features without the
    column (made before blocks had their own null token) score every span against the window's first one."""
    context = "alpha beta gamma delta epsilon"
    examples = datasets.Dataset.from_dict({"id": ["q1"], "context": [context]})
    blocks = [None, (0, 5), (6, 10), None, None, (11, 16), (17, 22), (23, 30), None]  # CLS a b SEP CLS c d e SEP
    single = [None, (0, 5), (6, 10), (11, 16), (17, 22), (23, 30), None, None, None]  # CLS a b c d e SEP + padding
    columns = {"example_id": ["q1"] * 2, "null_index": [0, 0], "offset_mapping": [blocks, single]}
    start, end = np.full(9, -5.0), np.full(9, -5.0)
    start[[0, 2, 4, 6]] = end[[0, 2, 4, 6]] = [2.5, 2.0, 4.5, 4.0]  # nulls 5 and 9; "beta" 4, "delta" 8
    other_start, other_end = np.full(9, -5.0), np.full(9, -5.0)
    other_start[[0, 3]] = other_end[[0, 3]] = [0.0, 1.0]  # null 0; "gamma" 2
    logits = ([start, other_start], [end, other_end])
    with_blocks = datasets.Dataset.from_dict({**columns, "block_null_indices": [[0, 4], [0]]})
    predictions, _ = postprocess_qa_predictions(examples, with_blocks, *logits, version_2=False)
    assert predictions == [{"id": "q1", "prediction_text": "gamma"}]
    predictions, _ = postprocess_qa_predictions(examples, datasets.Dataset.from_dict(columns), *logits, version_2=False)
    assert predictions == [{"id": "q1", "prediction_text": "delta"}]  # 8 - 5 = 3 against the first block's null
