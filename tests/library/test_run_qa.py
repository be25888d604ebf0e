"""QA data loading and its errors, answer re-alignment, training windows, SQuAD metrics on hand-checked cases, and
`examples/run_qa.py` end to end on the bundled SQuAD sample: train, evaluate, resume, two processes, and the guards
(output folder, launch, NaN loss)."""

import gzip
import json
import os
import shutil
import subprocess
import sys

import datasets
import pytest
import torch
from accelerate import PartialState
from conftest import CARRIED_CODE_FILES, REPO_ROOT, load_script, tiny_config, two_process_launcher
from huggingface_hub import ModelCard
from safetensors.torch import load_file
from transformers import AutoModelForQuestionAnswering, AutoTokenizer

from blockbert_hf import BlockBertForQuestionAnswering
from blockbert_hf.model.pipeline_question_answering import ExtractiveQuestionAnsweringPipeline
from blockbert_hf.saving import save_atomically
from blockbert_hf.tokenization import match_tokenizer_to_config, train_roberta_tokenizer
from blockbert_hf.train.qa import (
    QARunConfig,
    SquadMetric,
    check_qa_dataset,
    check_question_lengths,
    finetuning,
    load_qa_dataset,
    normalize_answer,
    preparation,
    prepare_train_features,
    read_mrqa_jsonl,
    read_squad_json,
    realign_answers,
    resolve_window_lengths,
    run_qa,
    split_squad_articles,
    training,
)
from blockbert_hf.train.runs import NonFiniteLossError, OutputDirError, list_checkpoints, read_metrics


SQUAD_V1 = REPO_ROOT / "data" / "samples" / "squad_v1.1_dev_sample.json"
SQUAD_V2 = REPO_ROOT / "data" / "samples" / "squad_v2.0_dev_sample.json"
RUN_QA = REPO_ROOT / "examples" / "run_qa.py"
# One thread per process: the runs are tiny, and two processes on two shared cores otherwise wait on each other.
RUN_ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
WINDOW_ARGS = ["--doc_stride", "32", "--per_device_eval_batch_size", "8"]


# ---------------------------------------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------------------------------------


def test_bundled_squad_samples_load_as_squad_rows(tmp_path):
    v1, v2 = read_squad_json(SQUAD_V1), read_squad_json(SQUAD_V2)
    assert (len(v1), len(v2)) == (204, 402)
    assert sum(len(a["text"]) == 0 for a in v2["answers"]) == 198 and all(a["text"] for a in v1["answers"])
    for row in v1:
        for text, start in zip(row["answers"]["text"], row["answers"]["answer_start"]):
            assert row["context"][start : start + len(text)] == text
    gzipped = tmp_path / "sample.json.gz"
    gzipped.write_bytes(gzip.compress(SQUAD_V1.read_bytes()))
    assert load_qa_dataset(str(gzipped))["id"] == v1["id"]


def test_mrqa_jsonl_files(tmp_path):
    context = "The Naktong River runs south. Its perimeter was held in 1950."
    records = [
        {"header": {"dataset": "SQuAD", "split": "dev"}},
        {
            "context": context,
            "qas": [
                {
                    "qid": "q1",
                    "question": "Which river?",
                    "answers": ["Naktong River"],
                    "detected_answers": [{"text": "Naktong River", "char_spans": [[4, 16]], "token_spans": [[1, 2]]}],
                },
                {
                    "qid": "q2",
                    "question": "When?",
                    "answers": ["1950"],
                    "detected_answers": [{"text": "1950", "char_spans": [[56, 59]], "token_spans": [[10, 10]]}],
                },
            ],
        },
    ]
    path = tmp_path / "mrqa.jsonl.gz"
    path.write_bytes(gzip.compress("\n".join(json.dumps(r) for r in records).encode()))
    rows = load_qa_dataset(str(path))
    assert rows["id"] == ["q1", "q2"]
    assert [a["text"] for a in rows["answers"]] == [["Naktong River"], ["1950"]]
    assert [a["answer_start"] for a in rows["answers"]] == [[4], [56]]
    (tmp_path / "bad.jsonl").write_text(json.dumps({"context": context, "qas": [{"qid": "x"}]}) + "\n")
    with pytest.raises(ValueError, match="line 1: not an MRQA record"):
        read_mrqa_jsonl(tmp_path / "bad.jsonl")


def test_bad_datasets_get_clear_errors(tmp_path):
    rows = {"id": ["a", "b"], "question": ["Who?", "What?"], "context": ["Some text.", "More text."]}
    with pytest.raises(ValueError, match=r"lacks the column\(s\) \['answers'\]"):
        check_qa_dataset(datasets.Dataset.from_dict(rows), "my data")
    answers = [{"text": ["Some"], "answer_start": [0]}, {"text": ["More"], "answer_start": [0]}]
    with pytest.raises(ValueError, match=r"empty context \(ids \['b'\]\)"):
        check_qa_dataset(datasets.Dataset.from_dict({**rows, "context": ["Some text.", "  "], "answers": answers}))
    with pytest.raises(ValueError, match="used more than once"):
        check_qa_dataset(datasets.Dataset.from_dict({**rows, "id": ["a", "a"], "answers": answers}))
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="not SQuAD-format JSON"):
        load_qa_dataset(str(tmp_path / "list.json"))
    (tmp_path / "noquestion.json").write_text(
        json.dumps({"data": [{"title": "T", "paragraphs": [{"context": "c", "qas": [{"id": "1", "answers": []}]}]}]})
    )
    with pytest.raises(ValueError, match="article 0 \\(T\\) lacks a SQuAD field: KeyError\\('question'\\)"):
        load_qa_dataset(str(tmp_path / "noquestion.json"))
    (tmp_path / "data.csv").write_text("id,question\n")
    with pytest.raises(ValueError, match="unknown file type"):
        load_qa_dataset(str(tmp_path / "data.csv"))
    with pytest.raises(ValueError, match="neither an existing file or folder nor a Hub dataset id"):
        load_qa_dataset("no such/dataset")
    with pytest.raises(ValueError, match=r"--mrqa_subset 'NewsQA' keeps one subset of MRQA rows"):
        load_qa_dataset(str(SQUAD_V1), mrqa_subset="NewsQA")
    with pytest.raises(ValueError, match="has no configurations"):
        load_qa_dataset(str(SQUAD_V1), config_name="plain_text")


def test_answers_with_wrong_offsets_are_realigned_or_skipped():
    context = "The fleet sailed in 1942. In 1942 the fleet sank."
    dataset = datasets.Dataset.from_dict(
        {
            "id": ["exact", "shifted", "lost", "partly"],
            "question": ["q"] * 4,
            "context": [context] * 4,
            "answers": [
                {"text": ["fleet"], "answer_start": [4]},
                {"text": ["1942"], "answer_start": [30]},  # off by one: 1942 is at 29 (and at 20)
                {"text": ["armada"], "answer_start": [4]},  # not in the context at all
                {"text": ["sank", "armada"], "answer_start": [44, 0]},
            ],
        }
    )
    fixed, counts = realign_answers(dataset)
    assert counts == {"realigned": 1, "dropped": 2, "removed_questions": 1}
    assert fixed["id"] == ["exact", "shifted", "partly"]
    assert fixed["answers"][1] == {"text": ["1942"], "answer_start": [29]}
    assert fixed["answers"][2] == {"text": ["sank"], "answer_start": [44]}


def test_training_windows_label_the_answer_tokens(tokenizer):
    examples = read_squad_json(SQUAD_V1).select(range(60))
    features = examples.map(
        prepare_train_features,
        batched=True,
        remove_columns=examples.column_names,
        fn_kwargs={"tokenizer": tokenizer, "max_seq_length": 128, "doc_stride": 32},
    )
    assert len(features) > 2 * len(examples)  # contexts are longer than one window
    encoded = tokenizer(
        [q.lstrip() for q in examples["question"]],
        list(examples["context"]),
        truncation="only_second",
        max_length=128,
        stride=32,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
    )
    exact, found = 0, set()
    for index, (start, end) in enumerate(zip(features["start_positions"], features["end_positions"])):
        example = examples[encoded["overflow_to_sample_mapping"][index]]
        if start == 0:
            assert end == 0
            continue
        offsets = encoded["offset_mapping"][index]
        labeled = example["context"][offsets[start][0] : offsets[end][1]]
        answer = example["answers"]["text"][0]
        assert answer in labeled  # the labeled tokens cover the answer (an answer may start inside a token)
        exact += labeled == answer
        found.add(example["id"])
    assert found == set(examples["id"])  # every answer is labeled in some window
    assert exact >= 0.9 * len(found)


def _training_windows(tokenizer, examples, **sampling):
    return examples.map(
        prepare_train_features,
        batched=True,
        remove_columns=examples.column_names,
        fn_kwargs={"tokenizer": tokenizer, "max_seq_length": 128, "doc_stride": 32, **sampling},
    )


def _windows_by_label(features) -> tuple[list, list]:
    """(answer windows, null windows) as tuples of their input ids and labels."""
    rows = list(zip(map(tuple, features["input_ids"]), features["start_positions"], features["end_positions"]))
    return [row for row in rows if row[1] != 0], [row for row in rows if row[1] == 0]


def test_negative_windows_are_sampled_at_the_rate_and_every_answer_window_is_kept(tokenizer):
    examples = read_squad_json(SQUAD_V1).select(range(60))
    positives, negatives = _windows_by_label(_training_windows(tokenizer, examples))
    assert len(negatives) > len(positives)  # long contexts: most windows do not hold the answer
    for rate in (0.0, 0.3):
        sampled_positives, sampled = _windows_by_label(
            _training_windows(tokenizer, examples, negative_window_rate=rate, seed=1)
        )
        assert sampled_positives == positives
        assert set(sampled) <= set(negatives)
        expected = rate * len(negatives)
        assert abs(len(sampled) - expected) <= 3 * (expected * (1 - rate)) ** 0.5 + 1e-9
    # The draw is fixed by the seed: the same seed gives the same windows, another seed others.
    again = _windows_by_label(_training_windows(tokenizer, examples, negative_window_rate=0.3, seed=1))[1]
    other = _windows_by_label(_training_windows(tokenizer, examples, negative_window_rate=0.3, seed=2))[1]
    assert again == sampled and other != sampled
    # Unanswerable questions (SQuAD 2.0) keep every window: they teach the null answer.
    unanswerable = read_squad_json(SQUAD_V2).filter(lambda answers: not answers["text"], input_columns="answers")
    all_windows = _training_windows(tokenizer, unanswerable)
    assert len(_training_windows(tokenizer, unanswerable, negative_window_rate=0.0)) == len(all_windows) > 0
    with pytest.raises(ValueError, match="negative_window_rate must be in \\[0, 1\\], got 1.5"):
        _training_windows(tokenizer, examples, negative_window_rate=1.5)


def test_windows_cut_by_several_processes_are_the_windows_of_one(tokenizer, tmp_path, monkeypatch):
    PartialState()  # the training data step logs through accelerate
    data_file = tmp_path / "squad.json"
    shutil.copy(SQUAD_V1, data_file)
    feature_kwargs = {"tokenizer": tokenizer, "max_seq_length": 128, "doc_stride": 32, "layout": "question_first"}
    processes = []  # the num_proc of every datasets map call
    map_windows = datasets.Dataset.map

    def recording_map(self, *args, **kwargs):
        processes.append(kwargs.get("num_proc"))
        return map_windows(self, *args, **kwargs)

    monkeypatch.setattr(datasets.Dataset, "map", recording_map)
    windows = []
    for workers in (None, 2):
        config = QARunConfig(
            model_name_or_path="unused", output_dir=str(tmp_path / "out"), do_train=True, train_file=str(data_file),
            validation_file=str(data_file), max_train_samples=40, max_eval_samples=40, negative_window_rate=0.3,
            seed=3, preprocessing_num_workers=workers,
        )  # fmt: skip
        data, processes[:] = preparation._QAData(), []
        preparation._training_examples(config, {**feature_kwargs, "block_size": None}, data, {})
        preparation._evaluation_examples(config, {**feature_kwargs, "block_size": None}, data)
        preparation._training_data(config, {**feature_kwargs, "block_size": None}, data, {})
        preparation._evaluation_data(config, {**feature_kwargs, "block_size": None}, data, {})
        assert processes[-2:] == [workers, workers]  # the training and the evaluation windows
        windows.append((data.train_features.to_dict(), data.eval_features.to_dict()))
    assert windows[0] == windows[1] and len(windows[0][0]["input_ids"]) > 40


def test_every_seed_and_epoch_gets_its_own_batch_order():
    seeds = {training.batch_order_seed(seed, epoch) for seed in range(8) for epoch in range(8)}
    assert len(seeds) == 64


def test_questions_longer_than_the_window_are_rejected_before_training(tokenizer):
    dataset = datasets.Dataset.from_dict(
        {
            "id": ["short", "long"],
            "question": ["Who?", " ".join(["Which battleship"] * 40)],
            "context": ["The battleship sank."] * 2,
            "answers": [{"text": [], "answer_start": []}] * 2,
        }
    )
    with pytest.raises(ValueError, match=r"1 question\(s\) are too long \(ids \['long'\]\).*doc_stride = 16"):
        check_question_lengths(dataset["id"], dataset["question"], tokenizer, max_seq_length=64, doc_stride=16)
    check_question_lengths(["short"], ["Who?"], tokenizer, max_seq_length=64, doc_stride=16)
    # The feature functions check too (the tokenizers library would panic instead of raising).
    with pytest.raises(ValueError, match="too long"):
        dataset.map(
            prepare_train_features,
            batched=True,
            fn_kwargs={"tokenizer": tokenizer, "max_seq_length": 64, "doc_stride": 16},
            remove_columns=dataset.column_names,
        )


def test_window_lengths_default_to_the_model_n(tokenizer):
    config = tiny_config(vocab_size=len(tokenizer))
    model = BlockBertForQuestionAnswering(config)
    assert resolve_window_lengths(model, match_tokenizer_to_config(tokenizer, config), None, 16) == (64, 16)
    with pytest.raises(ValueError, match="exceeds what the model takes \\(N = 64\\)"):
        resolve_window_lengths(model, tokenizer, 128, 16)
    with pytest.raises(ValueError, match="doc_stride"):
        resolve_window_lengths(model, tokenizer, 32, 32)


def test_split_articles_gives_disjoint_halves_of_unchanged_records(tmp_path):
    first, second = split_squad_articles(SQUAD_V1, tmp_path)
    source = json.loads(SQUAD_V1.read_text())
    halves = [json.loads(path.read_text()) for path in (first, second)]
    assert [a["title"] for a in halves[0]["data"]] == ["Sky_(United_Kingdom)"]
    assert halves[0]["data"] + halves[1]["data"] == source["data"]
    assert halves[1]["version"] == source["version"]
    assert first.name == "squad_v1.1_dev_sample.first-half.json"


# ---------------------------------------------------------------------------------------------------------------------
# Metrics
# ---------------------------------------------------------------------------------------------------------------------


def test_squad_v1_metric_on_a_hand_checked_case():
    references = [
        {"id": "1", "answers": {"text": ["Denver Broncos", "The Denver Broncos"], "answer_start": [0, 0]}},
        {"id": "2", "answers": {"text": ["Santa Clara, California"], "answer_start": [0]}},
        {"id": "3", "answers": {"text": ["1,000 MB"], "answer_start": [0]}},
    ]
    predictions = [
        {"id": "1", "prediction_text": "the Denver Broncos!"},  # normalizes to "denver broncos": exact
        {"id": "2", "prediction_text": "Clara"},  # precision 1, recall 1/3: F1 = 0.5
        {"id": "3", "prediction_text": "1000 MB"},  # punctuation is dropped: exact
    ]
    result = SquadMetric(config_name="squad").compute(predictions=predictions, references=references)
    assert result == pytest.approx({"exact_match": 200 / 3, "f1": 250 / 3})
    assert normalize_answer("  The  Denver, Broncos. ") == "denver broncos"
    with pytest.raises(ValueError, match="config_name='squad_v2'"):
        SquadMetric(config_name="squad").compute(
            predictions=[{"id": "4", "prediction_text": ""}],
            references=[{"id": "4", "answers": {"text": [], "answer_start": []}}],
        )


def test_squad_v2_metric_on_a_hand_checked_case():
    no_answer = {"text": [], "answer_start": []}
    references = [
        {"id": "1", "answers": {"text": ["Denver Broncos"], "answer_start": [0]}},
        {"id": "2", "answers": no_answer},
        {"id": "3", "answers": no_answer},
        {"id": "4", "answers": {"text": ["Santa Clara, California"], "answer_start": [0]}},
    ]
    predictions = [
        {"id": "1", "prediction_text": "Denver Broncos", "no_answer_probability": 0.1},  # exact
        {"id": "2", "prediction_text": "", "no_answer_probability": 0.9},  # correctly abstains: exact
        {"id": "3", "prediction_text": "Clara", "no_answer_probability": 0.4},  # should abstain: 0
        {"id": "4", "prediction_text": "Clara", "no_answer_probability": 0.2},  # F1 0.5
    ]
    metric = SquadMetric(config_name="squad_v2")
    result = metric.compute(predictions=predictions, references=references)
    expected = {
        "exact": 50.0, "f1": 62.5, "total": 4,
        "HasAns_exact": 50.0, "HasAns_f1": 75.0, "HasAns_total": 2,
        "NoAns_exact": 50.0, "NoAns_f1": 50.0, "NoAns_total": 2,
        # Abstaining above no-answer probability 0.1 keeps q1 (+1) and turns q3 into a correct abstention:
        # exact (1 + 1 + 1 + 0) / 4; F1 best at 0.2, where q4 keeps its 0.5: (1 + 1 + 1 + 0.5) / 4.
        "best_exact": 75.0, "best_exact_thresh": 0.1, "best_f1": 87.5, "best_f1_thresh": 0.2,
    }  # fmt: skip
    assert result == pytest.approx(expected)
    # With a no-answer threshold of 0.3, q3 (0.4) abstains and scores 1.
    thresholded = metric.compute(predictions=predictions, references=references, no_answer_threshold=0.3)
    assert (thresholded["exact"], thresholded["f1"]) == (75.0, 87.5)


# ---------------------------------------------------------------------------------------------------------------------
# examples/run_qa.py end to end
# ---------------------------------------------------------------------------------------------------------------------


def run_script(*args, launcher=(sys.executable,), env=None):
    result = subprocess.run(
        [*launcher, str(RUN_QA), *map(str, args)],
        capture_output=True,
        text=True,
        env={**RUN_ENV, **(env or {})},
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return result


@pytest.fixture(scope="module")
def tiny_qa_folder(tmp_path_factory):
    """A tiny BlockBERT QA model (N = 128) with a byte-level BPE tokenizer trained on the sample's contexts."""
    contexts = sorted(set(read_squad_json(SQUAD_V1)["context"]))
    tokenizer = train_roberta_tokenizer(contexts, vocab_size=1000, model_max_length=128)
    config = tiny_config(vocab_size=len(tokenizer), max_position_embeddings=130)
    match_tokenizer_to_config(tokenizer, config)
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("qa") / "tiny"
    save_atomically(folder, BlockBertForQuestionAnswering(config).save_pretrained, tokenizer.save_pretrained)
    return folder


def _trained_run_config(tiny_qa_folder, output_dir, **changes) -> QARunConfig:
    """The options of `trained_run`, as `examples/run_qa.py` parses them."""
    fields = dict(
        model_name_or_path=str(tiny_qa_folder), train_file=str(SQUAD_V1), validation_file=str(SQUAD_V1),
        do_train=True, do_eval=True, max_train_steps=8, per_device_train_batch_size=8, learning_rate=1e-3,
        checkpointing_steps="4", max_eval_samples=61, output_dir=str(output_dir), group_by_length=True,
        doc_stride=32, per_device_eval_batch_size=8,
    )  # fmt: skip
    return QARunConfig(**{**fields, **changes})


@pytest.fixture(scope="module")
def trained_run(tiny_qa_folder):
    """Train 8 steps (batches grouped by length, a checkpoint every 4) and evaluate on 61 questions of the v1.1
    sample."""
    output = tiny_qa_folder.parent / "run"
    result = run_script(
        "--model_name_or_path", tiny_qa_folder, "--train_file", SQUAD_V1, "--validation_file", SQUAD_V1,
        "--do_train", "--do_eval", "--max_train_steps", 8, "--per_device_train_batch_size", 8,
        "--learning_rate", 1e-3, "--checkpointing_steps", 4, "--max_eval_samples", 61, "--output_dir", output,
        "--group_by_length", *WINDOW_ARGS,
    )  # fmt: skip
    return output, result


def test_run_qa_trains_evaluates_and_writes_predictions(trained_run):
    output, result = trained_run
    summary = json.loads(result.stdout[result.stdout.index("{") :])
    assert summary["completed_steps"] == 8 and summary["train_examples"] == 204 and summary["eval_examples"] == 61
    assert summary["max_seq_length"] == 128 and summary["version_2_with_negative"] is False
    assert {p.name for p in (output / "model").iterdir()} >= {
        "config.json", "model.safetensors", "tokenizer.json", "modeling_blockbert.py", "pipeline_question_answering.py",
    }  # fmt: skip
    assert sorted(p.name for p in (output / "checkpoints").iterdir()) == ["step_4", "step_8"]
    predictions = json.loads((output / "eval_predictions.json").read_text())
    examples = read_squad_json(SQUAD_V1).select(range(61))
    assert list(predictions) == examples["id"]
    for row_id, context in zip(examples["id"], examples["context"]):
        assert predictions[row_id] and predictions[row_id] in context
    # The metrics written are those of the predictions written.
    metrics = json.loads((output / "eval_metrics.json").read_text())
    recomputed = SquadMetric(config_name="squad").compute(
        predictions=[{"id": k, "prediction_text": v} for k, v in predictions.items()],
        references=[{"id": row["id"], "answers": row["answers"]} for row in examples],
    )
    assert metrics["exact_match"] == pytest.approx(recomputed["exact_match"])
    assert metrics["f1"] == pytest.approx(recomputed["f1"]) and metrics["metric_implementation"]
    # The run's window scoring rule and objective are the defaults, saved with the model; every rule is scored for
    # comparison.
    assert (metrics["window_scoring"], metrics["qa_objective"]) == ("null_relative", "window")
    assert json.loads((output / "model" / "config.json").read_text())["question_answering"] == {
        "window_scoring": "null_relative",
        "qa_objective": "window",
    }
    by_rule = json.loads((output / "eval_predictions_by_window_scoring.json").read_text())
    assert set(by_rule) == set(metrics["scores_by_window_scoring"]) == {"raw", "null_relative"}
    assert by_rule["null_relative"] == predictions
    for rule, answers in by_rule.items():
        rescored = SquadMetric(config_name="squad").compute(
            predictions=[{"id": k, "prediction_text": v} for k, v in answers.items()],
            references=[{"id": row["id"], "answers": row["answers"]} for row in examples],
        )
        assert metrics["scores_by_window_scoring"][rule]["f1"] == pytest.approx(rescored["f1"])


def test_the_pipeline_agrees_with_run_qa_predictions(trained_run):
    output, _ = trained_run
    predictions = json.loads((output / "eval_predictions.json").read_text())
    model = AutoModelForQuestionAnswering.from_pretrained(output / "model").eval()
    qa = ExtractiveQuestionAnsweringPipeline(model=model, tokenizer=AutoTokenizer.from_pretrained(output / "model"))
    examples = read_squad_json(SQUAD_V1).select(range(12))
    answers = qa(
        [{"question": q, "context": c} for q, c in zip(examples["question"], examples["context"])],
        doc_stride=32,
        max_answer_len=30,
    )
    assert [a["answer"] for a in answers] == [predictions[row_id] for row_id in examples["id"]]


def test_two_processes_give_the_same_predictions_as_one(trained_run):
    output, _ = trained_run
    two = output.parent / "two_processes"
    result = run_script(
        "--model_name_or_path", output / "model", "--validation_file", SQUAD_V1, "--do_eval",
        "--max_eval_samples", 61, "--output_dir", two, *WINDOW_ARGS,
        launcher=two_process_launcher(),
        env={"ACCELERATE_USE_CPU": "1"},
    )  # fmt: skip
    assert "2 process(es)" in result.stderr
    one = json.loads((output / "eval_predictions.json").read_text())
    assert json.loads((two / "eval_predictions.json").read_text()) == one
    metrics = json.loads((two / "eval_metrics.json").read_text())
    assert (
        metrics["eval_examples"] == 61
        and metrics["exact_match"] == json.loads((output / "eval_metrics.json").read_text())["exact_match"]
    )


def test_resuming_from_a_checkpoint_gives_the_same_model(trained_run, tiny_qa_folder):
    output, _ = trained_run
    resumed = output.parent / "resumed"
    shutil.copytree(output / "checkpoints" / "step_4", resumed / "checkpoints" / "step_4")
    result = run_script(
        "--model_name_or_path", tiny_qa_folder, "--train_file", SQUAD_V1, "--do_train", "--max_train_steps", 8,
        "--per_device_train_batch_size", 8, "--learning_rate", 1e-3, "--output_dir", resumed,
        "--resume_from_checkpoint", "latest", "--group_by_length", *WINDOW_ARGS,
    )  # fmt: skip
    assert "after 4 steps" in result.stderr
    expected, got = (
        load_file(output / "model" / "model.safetensors"),
        load_file(resumed / "model" / "model.safetensors"),
    )
    assert expected.keys() == got.keys()
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], rtol=1e-5, atol=1e-6)


def _save_tiny_qa_model(folder, **config_overrides):
    contexts = sorted(set(read_squad_json(SQUAD_V1)["context"]))
    tokenizer = train_roberta_tokenizer(contexts, vocab_size=1000, model_max_length=128)
    config = tiny_config(vocab_size=len(tokenizer), max_position_embeddings=130, **config_overrides)
    match_tokenizer_to_config(tokenizer, config)
    torch.manual_seed(0)
    save_atomically(folder, BlockBertForQuestionAnswering(config).save_pretrained, tokenizer.save_pretrained)
    return folder


def test_a_run_killed_mid_epoch_with_dropout_resumes_exactly(tmp_path):
    """Dropout on (the default of real models), killed after a checkpoint in the middle of an epoch: the resumed run
    logs the same losses and ends with the same weights as the uninterrupted one."""
    model = _save_tiny_qa_model(tmp_path / "model", hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
    options = dict(
        do_eval=False, max_train_steps=None, num_train_epochs=2, max_train_samples=16, per_device_train_batch_size=4,
        logging_steps=1, checkpointing_steps="3",
    )  # fmt: skip
    reference = run_qa(_trained_run_config(model, tmp_path / "reference", **options))
    steps_per_epoch = reference["completed_steps"] // 2
    assert steps_per_epoch > 3 and reference["completed_steps"] > 6  # step 3 is inside the first epoch
    killed = tmp_path / "killed"  # what a kill after step 3's checkpoint leaves (the log goes on past it)
    shutil.copytree(reference_dir := tmp_path / "reference", killed, ignore=shutil.ignore_patterns("model", "step_*"))
    shutil.copytree(reference_dir / "checkpoints" / "step_3", killed / "checkpoints" / "step_3")
    run_qa(_trained_run_config(model, killed, resume=True, **options))
    expected, resumed = read_metrics(reference_dir / "metrics.jsonl"), read_metrics(killed / "metrics.jsonl")
    assert [record["loss"] for record in resumed] == [record["loss"] for record in expected]
    weights = [load_file(run / "model" / "model.safetensors") for run in (reference_dir, killed)]
    for name, tensor in weights[0].items():
        torch.testing.assert_close(weights[1][name], tensor, rtol=0, atol=0, msg=name)


def test_run_qa_on_squad_v2_scores_unanswerable_questions(tiny_qa_folder):
    output = tiny_qa_folder.parent / "v2"
    run_script(
        "--model_name_or_path", tiny_qa_folder, "--validation_file", SQUAD_V2, "--do_eval",
        "--max_eval_samples", 40, "--output_dir", output, "--write_nbest", *WINDOW_ARGS,
    )  # fmt: skip
    metrics = json.loads((output / "eval_metrics.json").read_text())
    assert metrics["version_2_with_negative"] is True
    assert metrics["HasAns_total"] + metrics["NoAns_total"] == metrics["total"] == 40 and metrics["NoAns_total"] > 0
    predictions = json.loads((output / "eval_predictions.json").read_text())
    null_odds = json.loads((output / "eval_null_odds.json").read_text())
    nbest = json.loads((output / "eval_nbest_predictions.json").read_text())
    assert list(predictions) == list(null_odds) == list(nbest) and len(predictions) == 40
    for row_id, answers in nbest.items():
        # The prediction is the top of the n-best list, which includes the null answer with its probability.
        assert predictions[row_id] == answers[0]["answer"]
        null = [a for a in answers if (a["start"], a["end"], a["answer"]) == (0, 0, "")]
        assert len(null) == 1 and null[0]["score"] == pytest.approx(null_odds[row_id])


def test_a_multi_process_launch_that_accelerate_runs_as_one_process_is_an_error(tiny_qa_folder, tmp_path):
    """Without ACCELERATE_USE_CPU on a machine without GPUs, torchrun's processes would each run the whole job."""
    result = subprocess.run(
        [sys.executable, str(RUN_QA), "--model_name_or_path", str(tiny_qa_folder), "--validation_file", str(SQUAD_V1),
         "--do_eval", "--output_dir", str(tmp_path / "out")],
        capture_output=True, text=True, env={**RUN_ENV, "WORLD_SIZE": "2"}, timeout=300,
    )  # fmt: skip
    assert result.returncode != 0 and "set ACCELERATE_USE_CPU=1" in result.stderr
    assert not (tmp_path / "out").exists()


def test_run_qa_refuses_the_folder_of_another_or_a_finished_run_before_any_work(
    trained_run, tiny_qa_folder, monkeypatch
):
    output, _ = trained_run
    monkeypatch.setattr(finetuning, "_load_model_and_tokenizer", lambda config: pytest.fail("work started"))
    with pytest.raises(OutputDirError, match="--learning_rate 0.001 there, 0.0005 now"):
        run_qa(_trained_run_config(tiny_qa_folder, output, learning_rate=5e-4))
    with pytest.raises(OutputDirError, match=r"holds a finished run \(model, eval_metrics.json\)"):
        run_qa(_trained_run_config(tiny_qa_folder, output))
    with pytest.raises(OutputDirError, match="--do_train True there, False now"):  # evaluating into it
        evaluation = dict(model_name_or_path=str(output / "model"), validation_file=str(SQUAD_V1), do_eval=True)
        run_qa(QARunConfig(output_dir=str(output), **evaluation))


def test_run_qa_resumes_only_a_checkpoint_of_the_same_run(trained_run, tiny_qa_folder, tmp_path, monkeypatch):
    output, _ = trained_run
    monkeypatch.setattr(finetuning, "_load_model_and_tokenizer", lambda config: pytest.fail("work started"))
    checkpoint = str(output / "checkpoints" / "step_4")
    changed = _trained_run_config(tiny_qa_folder, tmp_path, learning_rate=5e-4, resume_from_checkpoint=checkpoint)
    with pytest.raises(OutputDirError, match="Cannot resume: .*--learning_rate 0.001 there, 0.0005 now"):
        run_qa(changed)
    with pytest.raises(OutputDirError, match="no complete checkpoint"):
        run_qa(_trained_run_config(tiny_qa_folder, tmp_path, resume=True))


def test_resume_refuses_a_training_file_whose_content_changed_under_the_same_path(
    tiny_qa_folder, tmp_path, monkeypatch
):
    train_file = tmp_path / "train.json"
    shutil.copyfile(SQUAD_V1, train_file)
    output = tmp_path / "run"
    options = dict(train_file=str(train_file), do_eval=False, max_train_steps=2, max_train_samples=16)
    run_qa(_trained_run_config(tiny_qa_folder, output, checkpointing_steps="1", **options))
    shutil.rmtree(output / "model")  # as a run killed after its last checkpoint leaves it
    squad = json.loads(train_file.read_text())
    squad["data"][0]["paragraphs"][0]["qas"][0]["question"] = "Which question is this now?"
    train_file.write_text(json.dumps(squad))
    monkeypatch.setattr(finetuning, "_load_model_and_tokenizer", lambda config: pytest.fail("work started"))
    with pytest.raises(OutputDirError, match=r"Cannot resume: .*the content of --train_file changed \(\d+ bytes"):
        run_qa(_trained_run_config(tiny_qa_folder, output, checkpointing_steps="1", resume=True, **options))


def test_resuming_from_the_last_checkpoint_runs_no_step_past_max_train_steps(trained_run, tiny_qa_folder, tmp_path):
    output, _ = trained_run
    shutil.copytree(output / "checkpoints" / "step_8", tmp_path / "checkpoints" / "step_8")
    summary = run_qa(_trained_run_config(tiny_qa_folder, tmp_path, do_eval=False, resume=True))
    assert summary["completed_steps"] == 8
    expected, got = (
        load_file(output / "model" / "model.safetensors"),
        load_file(tmp_path / "model" / "model.safetensors"),
    )
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], rtol=0, atol=0)


def test_a_nan_loss_stops_fine_tuning_and_keeps_the_last_good_checkpoint(tiny_qa_folder, tmp_path, monkeypatch):
    calls = []
    original = BlockBertForQuestionAnswering.forward

    def turns_nan_at_step_3(self, *args, **kwargs):
        output = original(self, *args, **kwargs)
        calls.append(1)
        if len(calls) >= 3:
            output.loss = output.loss * float("nan")
        return output

    monkeypatch.setattr(BlockBertForQuestionAnswering, "forward", turns_nan_at_step_3)
    config = _trained_run_config(tiny_qa_folder, tmp_path, do_eval=False, max_train_samples=40, checkpointing_steps="1")
    with pytest.raises(NonFiniteLossError, match=r"loss is nan at step 3.*last good checkpoint is .*step_2"):
        run_qa(config)
    assert [path.name for path in list_checkpoints(tmp_path)] == ["step_1", "step_2"]
    assert not (tmp_path / "model").exists()


def test_attention_dropout_can_be_set_for_fine_tuning_and_a_bad_value_stops_before_any_work(
    tiny_qa_folder, tmp_path, monkeypatch
):
    config = _trained_run_config(
        tiny_qa_folder, tmp_path / "run", do_eval=False, max_train_steps=1, attention_probs_dropout_prob=0.25
    )
    run_qa(config)
    saved = json.loads((tmp_path / "run" / "model" / "config.json").read_text())
    source = json.loads((tiny_qa_folder / "config.json").read_text())
    assert (source["attention_probs_dropout_prob"], saved["attention_probs_dropout_prob"]) == (0.0, 0.25)

    monkeypatch.setattr(finetuning, "_load_model_and_tokenizer", lambda config: pytest.fail("work started"))
    for bad in (1.0, -0.1):
        changed = _trained_run_config(tiny_qa_folder, tmp_path / "bad", attention_probs_dropout_prob=bad)
        with pytest.raises(ValueError, match=rf"--attention_probs_dropout_prob must be in \[0, 1\), got {bad}"):
            run_qa(changed)
    assert not (tmp_path / "bad").exists()


def test_the_window_scoring_rule_is_saved_with_the_model_and_used_by_its_evaluation(tiny_qa_folder, tmp_path):
    run_qa(
        _trained_run_config(tiny_qa_folder, tmp_path / "run", do_eval=False, max_train_steps=1, window_scoring="raw")
    )
    saved = json.loads((tmp_path / "run" / "model" / "config.json").read_text())
    assert saved["question_answering"] == {"window_scoring": "raw", "qa_objective": "window"}
    evaluation = _trained_run_config(
        tmp_path / "run" / "model", tmp_path / "eval", do_train=False, train_file=None, max_eval_samples=4
    )
    assert run_qa(evaluation)["window_scoring"] == "raw"


@pytest.mark.parametrize(
    ("option", "bad", "message"),
    [
        ("window_scoring", "best", "window_scoring='best' is unknown"),
        ("negative_window_rate", -0.5, r"--negative_window_rate must be in \[0, 1\], got -0.5"),
        ("qa_objective", "block", "qa_objective='block' is unknown"),
        # the model records no layout: its windows are question_first, with one null token
        ("qa_objective", "per_block", "per_block trains every block against its own null token"),
    ],
)
def test_bad_sampling_and_scoring_options_stop_before_any_work(
    tiny_qa_folder, tmp_path, monkeypatch, option, bad, message
):
    monkeypatch.setattr(finetuning, "_load_model_and_tokenizer", lambda config: pytest.fail("work started"))
    with pytest.raises(ValueError, match=message):
        run_qa(_trained_run_config(tiny_qa_folder, tmp_path / "bad", **{option: bad}))
    assert not (tmp_path / "bad").exists()


def test_gradients_are_clipped_to_max_grad_norm_and_their_norm_is_logged(tiny_qa_folder, tmp_path):
    from safetensors.torch import load_file

    def run(name, **changes):
        config = _trained_run_config(
            tiny_qa_folder, tmp_path / name, max_train_steps=2, do_eval=False, logging_steps=1,
            checkpointing_steps=None, **changes,
        )  # fmt: skip
        run_qa(config)
        records = [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
        return load_file(tmp_path / name / "model" / "model.safetensors"), records

    start = load_file(tiny_qa_folder / "model.safetensors")
    free, free_records = run("free")
    clipped, clipped_records = run("clipped", max_grad_norm=1e-9)

    def moved(weights):
        return max((weights[name].float() - start[name].float()).abs().max().item() for name in start)

    # the norm before clipping is logged either way: the first step's is the same in both runs
    assert [record["step"] for record in free_records] == [1, 2]
    assert clipped_records[0]["grad_norm_max"] == pytest.approx(free_records[0]["grad_norm_max"])
    assert free_records[0]["grad_norm_max"] > 0
    # Adam divides by the gradients' size, but clipped to 1e-9 they fall below its epsilon (1e-8): the clipped updates
    # all but vanish, while the free ones move weights by about the learning rate
    assert moved(clipped) < moved(free) / 10


def test_evaluation_after_every_epoch_logs_loss_and_scores(tiny_qa_folder, tmp_path):
    output = tmp_path / "run"
    config = _trained_run_config(
        tiny_qa_folder, output, max_train_steps=None, num_train_epochs=2, max_train_samples=24,
        max_eval_samples=8, eval_strategy="epoch", checkpointing_steps=None,
    )  # fmt: skip
    results = run_qa(config)
    records = [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()]
    evaluations = [record for record in records if "eval_loss" in record]
    assert [record["epoch"] for record in evaluations] == [0, 1]
    steps_per_epoch = results["completed_steps"] // 2
    assert [record["step"] for record in evaluations] == [steps_per_epoch, 2 * steps_per_epoch]
    assert all(record["eval_loss"] > 0 and 0 <= record["eval_f1"] <= 100 for record in evaluations)
    final = json.loads((output / "eval_metrics.json").read_text())
    assert evaluations[-1]["eval_f1"] == final["f1"] and evaluations[-1]["eval_loss"] == final["eval_loss"]
    assert "Validation loss" in (output / "model" / "README.md").read_text()  # the card's training results
    with pytest.raises(
        ValueError, match="--eval_strategy epoch evaluates while training: add --do_train and --do_eval"
    ):
        run_qa(_trained_run_config(tiny_qa_folder, tmp_path / "bad", do_eval=False, eval_strategy="epoch"))


def test_the_per_block_objective_trains_and_evaluates_and_is_recorded_with_the_model(
    tiny_qa_folder, tmp_path, monkeypatch
):
    """`--qa_objective per_block` on question-prefixed windows (b = 64, N = 128): the loss of training and evaluation
    is the per-block one, and the model, its card, the run's arguments and metrics record it; evaluating the saved
    model takes its objective by default."""
    block_sizes = []
    per_block_loss = training.per_block_span_loss

    def recording(*args):
        block_sizes.append(args[4])
        return per_block_loss(*args)

    monkeypatch.setattr(training, "per_block_span_loss", recording)
    output = tmp_path / "run"
    results = run_qa(
        _trained_run_config(
            tiny_qa_folder, output, max_train_steps=2, max_train_samples=16, max_eval_samples=8,
            checkpointing_steps=None, window_layout="question_prefixed_blocks", qa_objective="per_block",
        )
    )  # fmt: skip
    assert results["qa_objective"] == "per_block" and results["completed_steps"] == 2
    trained = len(block_sizes)
    assert trained > 2 and set(block_sizes) == {64}  # each training step and evaluation batch
    assert json.loads((output / "model" / "config.json").read_text())["question_answering"] == {
        "window_scoring": "null_relative",
        "qa_objective": "per_block",
        "window_layout": "question_prefixed_blocks",
        "block_size": 64,
    }
    assert json.loads((output / "run_args.json").read_text())["qa_objective"] == "per_block"
    assert json.loads((output / "eval_metrics.json").read_text())["qa_objective"] == "per_block"
    assert "- qa_objective: per_block" in (output / "model" / "README.md").read_text()

    evaluation = _trained_run_config(
        output / "model", tmp_path / "eval", do_train=False, train_file=None, max_eval_samples=8
    )
    evaluated = run_qa(evaluation)
    assert evaluated["qa_objective"] == "per_block" and len(block_sizes) > trained
    assert evaluated["eval_loss"] == pytest.approx(results["eval_loss"], rel=1e-5)
    evaluation.output_dir, evaluation.qa_objective = str(tmp_path / "window"), "window"
    assert run_qa(evaluation)["eval_loss"] != pytest.approx(results["eval_loss"], rel=1e-3)
    evaluation.output_dir, evaluation.window_layout = str(tmp_path / "bad"), "question_first"
    evaluation.qa_objective = None  # the saved model's per_block, on windows without a null token per block
    with pytest.raises(ValueError, match="The model records qa_objective 'per_block'"):
        run_qa(evaluation)
    assert not (tmp_path / "bad").exists()


# ---------------------------------------------------------------------------------------------------------------------
# The options run_qa shares with the ecosystem: any SQuAD-schema dataset, publishing, trackers, checkpointing
# ---------------------------------------------------------------------------------------------------------------------


def test_run_qa_trains_on_a_saved_dataset_folder_and_publishes_the_finished_model_folder(
    tiny_qa_folder, tmp_path, hub, monkeypatch
):
    """`--dataset_name` takes a `DatasetDict.save_to_disk` folder (its splits); `--push_to_hub` uploads
    OUTPUT_DIR/model as it was saved, card included, with activation checkpointing and TensorBoard on."""
    rows = read_squad_json(SQUAD_V1).select(range(16))
    datasets.DatasetDict(train=rows, validation=rows).save_to_disk(str(tmp_path / "my-squad"))
    checkpointed = []
    enable = finetuning.enable_gradient_checkpointing

    def recording_enable(model):
        enable(model)
        checkpointed.append(model.is_activation_checkpointing)

    monkeypatch.setattr(finetuning, "enable_gradient_checkpointing", recording_enable)
    output = tmp_path / "run"
    config = _trained_run_config(
        tiny_qa_folder, output, train_file=None, validation_file=None, dataset_name=str(tmp_path / "my-squad"),
        max_train_steps=1, max_eval_samples=4, checkpointing_steps=None, push_to_hub=True,
        hub_model_id="someone/tiny-blockbert-qa", gradient_checkpointing=True, report_to="tensorboard",
    )  # fmt: skip
    results = run_qa(config)
    assert results["train_examples"] == 16 and results["eval_examples"] == 4 and checkpointed == [True]
    assert results["hub_repo_id"] == "someone/tiny-blockbert-qa"
    assert list((output / "blockbert_qa").rglob("events.out.tfevents.*"))  # TensorBoard's log
    files = hub.uploaded("someone/tiny-blockbert-qa")
    assert set(files) >= {
        "config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "README.md", *CARRIED_CODE_FILES
    }  # fmt: skip
    assert files == {path.name: path.read_bytes() for path in (output / "model").iterdir()}  # as saved, card final
    card = files["README.md"].decode()
    assert "F1" in card and "`my-squad`" in card and str(tmp_path) not in card
    assert ModelCard(card).data.base_model is None  # a local start whose card names no Hub model: none made up


def test_the_card_carries_the_hub_model_a_local_starting_folder_derives_from(tiny_qa_folder, tmp_path):
    """A converted or adapted folder's card records the Hub model it derives from; the fine-tuned model's card
    carries it on as its base_model."""
    start = tmp_path / "converted"
    shutil.copytree(tiny_qa_folder, start)
    ModelCard("---\nbase_model: someone/source-model\n---\n\n# converted\n").save(start / "README.md")
    run_qa(
        _trained_run_config(
            start, tmp_path / "run", do_eval=False, max_train_steps=1, max_train_samples=8, checkpointing_steps=None
        )
    )
    card = ModelCard.load(tmp_path / "run" / "model" / "README.md")
    assert card.data.base_model == "someone/source-model"
    assert "local checkpoint (`converted`, which derives from [someone/source-model]" in card.text


def test_publishing_options_are_checked_before_any_work(tiny_qa_folder, tmp_path, hub, monkeypatch):
    monkeypatch.setattr(finetuning, "_load_model_and_tokenizer", lambda config: pytest.fail("work started"))
    bad_id = _trained_run_config(tiny_qa_folder, tmp_path / "bad", push_to_hub=True, hub_model_id="a/b/c")
    with pytest.raises(ValueError, match="--hub_model_id 'a/b/c' is not a Hub repository id"):
        run_qa(bad_id)
    evaluation_only = _trained_run_config(tiny_qa_folder, tmp_path / "bad", do_train=False, push_to_hub=True)
    with pytest.raises(ValueError, match="--push_to_hub uploads the fine-tuned model: add --do_train"):
        run_qa(evaluation_only)
    assert not (tmp_path / "bad").exists() and hub.repos == {} and hub.commits == []


def test_the_dataset_subset_option_of_earlier_versions_is_now_mrqa_subset_with_a_note(monkeypatch, capsys):
    script = load_script("examples/run_qa.py")
    parsed = []
    monkeypatch.setattr(script, "run_qa", lambda config: parsed.append(config) or {})
    argv = ["--model_name_or_path", "m", "--output_dir", "o", "--dataset_name", "mrqa", "--dataset_subset=NewsQA"]
    assert script.main(argv) == 0
    assert parsed[0].mrqa_subset == "NewsQA" and parsed[0].dataset_config_name is None
    assert "note: --dataset_subset is now --mrqa_subset" in capsys.readouterr().err
