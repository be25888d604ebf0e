"""The steps of `make demo` (`blockbert_experiments.demo`) on a tiny model and the bundled SQuAD sample: the data split,
the held-out evaluation through the saved folder's pipeline, the cost comparison on the same weights, and the report.
CI runs the demo itself with the real weights (`make demo`)."""

import copy
import json
import shutil

import pytest
import torch
from conftest import REPO_ROOT, tiny_config
from safetensors.torch import load_file
from transformers import AutoTokenizer

from blockbert_experiments import demo
from blockbert_experiments.demo import (
    attention_variants,
    evaluate_held_out,
    format_report,
    measure_attention_cost,
    read_held_out_article,
    recorded_arguments,
    with_running_positions,
    write_training_file,
)
from blockbert_hf import BlockBertConfig, BlockBertForQuestionAnswering, BlockBertModel
from blockbert_hf.conversion import with_blockwise_fields
from blockbert_hf.tokenization import match_tokenizer_to_config


SQUAD_SAMPLE = REPO_ROOT / "data" / "samples" / "squad_v1.1_dev_sample.json"
HELD_OUT = "Sky_(United_Kingdom)"


@pytest.fixture(scope="module")
def qa_folder(tmp_path_factory, tokenizer):
    """A saved tiny BlockBERT QA model (N = 512, n = 4 blocks of 128, heads 1:1:1:1) with its tokenizer."""
    config = tiny_config(
        vocab_size=len(tokenizer), max_position_embeddings=514, num_blocks=4, heads_per_shift="1:1:1:1"
    )
    folder = tmp_path_factory.mktemp("demo") / "model"
    model = BlockBertForQuestionAnswering(config).eval()
    model.save_pretrained(folder)
    tokenizer = match_tokenizer_to_config(copy.deepcopy(tokenizer), config)  # the fixture is shared
    tokenizer.save_pretrained(folder)
    return folder


def test_training_contexts_are_whole_articles_with_answers_in_place_leaving_the_held_out_one_out(tmp_path):
    """Training contexts are whole articles, so that training windows span several blocks as the pipeline's windows
    over a long document do."""
    written = write_training_file(SQUAD_SAMPLE, HELD_OUT, tmp_path / "train.json")
    source = next(a for a in json.loads(SQUAD_SAMPLE.read_text())["data"] if a["title"] != HELD_OUT)
    (article,) = json.loads((tmp_path / "train.json").read_text())["data"]
    assert [article["title"]] == written["articles"] == ["Jacksonville,_Florida"]
    (paragraph,) = article["paragraphs"]
    assert paragraph["context"] == "\n".join(p["context"] for p in source["paragraphs"])
    assert written["questions"] == len(paragraph["qas"]) == sum(len(p["qas"]) for p in source["paragraphs"])
    for qa in paragraph["qas"]:
        for answer in qa["answers"]:
            start = answer["answer_start"]
            assert paragraph["context"][start : start + len(answer["text"])] == answer["text"]
    first_only = write_training_file(SQUAD_SAMPLE, "no such title", tmp_path / "first.json", max_articles=1)
    assert first_only["articles"] == [HELD_OUT]


def test_the_training_questions_are_a_seeded_choice(tmp_path):
    def chosen(seed, name):
        write_training_file(SQUAD_SAMPLE, HELD_OUT, tmp_path / name, max_questions=30, seed=seed)
        data = json.loads((tmp_path / name).read_text())["data"]
        return [qa["id"] for article in data for paragraph in article["paragraphs"] for qa in paragraph["qas"]]

    first, again, other = chosen(0, "a.json"), chosen(0, "b.json"), chosen(1, "c.json")
    assert len(first) == len(set(first)) == 30
    assert first == again and first != other


def test_the_other_questions_read_their_own_paragraph_and_half_of_them_another_one_without_answer(tmp_path):
    options = dict(max_questions=10, paragraph_questions=True, paragraph_negative_rate=0.5)
    written = write_training_file(SQUAD_SAMPLE, HELD_OUT, tmp_path / "train.json", **options)
    source = next(a for a in json.loads(SQUAD_SAMPLE.read_text())["data"] if a["title"] != HELD_OUT)
    total = sum(len(p["qas"]) for p in source["paragraphs"])
    (article,) = json.loads((tmp_path / "train.json").read_text())["data"]
    whole, *paragraphs = article["paragraphs"]
    assert len(whole["qas"]) == written["questions"] == 10
    assert whole["context"] == "\n".join(p["context"] for p in source["paragraphs"])
    own_context = {qa["id"]: p["context"] for p in source["paragraphs"] for qa in p["qas"]}
    answered = [(p["context"], qa) for p in paragraphs for qa in p["qas"] if qa["answers"]]
    unanswered = [(p["context"], qa) for p in paragraphs for qa in p["qas"] if not qa["answers"]]
    assert len(answered) == written["paragraph_questions"] == total - 10
    assert {qa["id"] for _, qa in answered}.isdisjoint(qa["id"] for qa in whole["qas"])
    for context, qa in answered:
        assert context == own_context[qa["id"]]
        for answer in qa["answers"]:
            assert context[answer["answer_start"] :].startswith(answer["text"])
    assert len(unanswered) == written["paragraph_negatives"]
    assert 0.35 * len(answered) < len(unanswered) < 0.65 * len(answered)
    for context, qa in unanswered:
        question_id = qa["id"].removesuffix("_other")
        assert qa["id"] != question_id and context != own_context[question_id]
        assert context in own_context.values()


def test_a_training_file_with_only_the_held_out_article_is_an_error(tmp_path):
    only_sky = tmp_path / "sky.json"
    data = json.loads(SQUAD_SAMPLE.read_text())
    only_sky.write_text(json.dumps({"version": "1.1", "data": [a for a in data["data"] if a["title"] == HELD_OUT]}))
    with pytest.raises(ValueError, match="no article other than"):
        write_training_file(only_sky, HELD_OUT, tmp_path / "train.json")
    assert not (tmp_path / "train.json").exists()


def test_the_results_record_the_path_options_relative_to_the_repository_or_by_name(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO_ROOT)
    outside = str(tmp_path / "squad" / "dev-v1.1.json.gz")  # a data file outside the repository
    arguments = dict(output_dir="outputs/demo", source_model=None, train_file=outside, seed=0)
    assert recorded_arguments({**arguments, "held_out_file": str(SQUAD_SAMPLE)}) == {  # the bundled sample, absolute
        **arguments, "train_file": "dev-v1.1.json.gz", "held_out_file": "data/samples/squad_v1.1_dev_sample.json"
    }  # fmt: skip


def test_the_held_out_article_keeps_its_paragraphs_in_order_and_an_unknown_title_names_the_titles_there():
    article = read_held_out_article(SQUAD_SAMPLE, HELD_OUT)
    data = json.loads(SQUAD_SAMPLE.read_text())
    sky = next(a for a in data["data"] if a["title"] == HELD_OUT)
    assert article.paragraphs == [paragraph["context"] for paragraph in sky["paragraphs"]]
    assert article.document.startswith(sky["paragraphs"][0]["context"])
    assert len(article.questions) == sum(len(paragraph["qas"]) for paragraph in sky["paragraphs"])
    with pytest.raises(ValueError, match=r"no article titled 'Sky'.*Jacksonville,_Florida, Sky_\(United_Kingdom\)"):
        read_held_out_article(SQUAD_SAMPLE, "Sky")


def test_held_out_questions_are_answered_over_their_paragraph_and_over_the_whole_article(qa_folder):
    article = read_held_out_article(SQUAD_SAMPLE, HELD_OUT)
    article.questions = article.questions.select(range(6))  # a random model: only the plumbing is checked
    results = evaluate_held_out(qa_folder, article, max_document_questions=2, num_examples=2)
    assert results["own_paragraph"]["questions"] == 6 and results["whole_document"]["questions"] == 2
    assert results["document_tokens"] > 3 * 512  # the whole article takes several windows of N tokens
    for scores in (results["own_paragraph"], results["whole_document"]):
        assert 0 <= scores["exact_match"] <= scores["f1"] <= 100 and scores["seconds_per_question"] > 0
    first = results["examples"][0]
    assert first["question"] == article.questions[0]["question"]
    assert first["gold"] == article.questions[0]["answers"]["text"][0]
    assert first["whole_document"] in article.document and first["own_paragraph"] in article.questions[0]["context"]


def test_the_cost_comparison_runs_full_n2_and_n4_on_the_same_weights(qa_folder):
    model = BlockBertForQuestionAnswering.from_pretrained(qa_folder)
    variants = attention_variants(model)
    assert variants == {
        "full": {"num_blocks": 1, "heads_per_shift": None},
        "n2": {"num_blocks": 2, "heads_per_shift": None},
        "n4": {"num_blocks": 4, "heads_per_shift": [1, 1, 1, 1]},  # the model's own heads at its own n
    }
    article = read_held_out_article(SQUAD_SAMPLE, HELD_OUT)
    cost = measure_attention_cost(qa_folder, "Who founded Sky?", article.document, rounds=2, kernels=("eager",))
    assert cost["tokens"] == 512 and cost["rounds"] == 2
    eager = cost["kernels"]["eager"]
    assert [entry["label"] for entry in eager["models"].values()] == [
        "full attention (n = 1)",
        "BlockBERT n = 2 (3:1)",
        "BlockBERT n = 4 (1:1:1:1)",
    ]
    # The eager kernel materialises the scores: N x N for full attention, n blocks of b x b for BlockBERT.
    assert eager["memory_ratio_to_full"]["n4"] < eager["memory_ratio_to_full"]["n2"] < 1
    assert set(eager["time_ratio_to_full"]) == {"n2", "n4"}


def test_a_model_with_block_relative_positions_is_compared_on_running_positions_that_compute_the_same():
    """Full attention has one block: the cost comparison reads N tokens with positions that run on through N, over rows
    that repeat the trained ones, which at b = the trained row count are the rows block-relative positions give."""
    config = tiny_config(block_relative_positions=True, block_size=64, num_blocks=2, max_position_embeddings=66)
    model = BlockBertForQuestionAnswering(config).eval()
    running = with_running_positions(model)
    assert not running.config.block_relative_positions
    assert running.config.max_sequence_length == model.config.max_sequence_length == 128
    input_ids = torch.randint(3, config.vocab_size, (2, 128))
    with torch.no_grad():
        expected, got = model(input_ids=input_ids), running(input_ids=input_ids)
        torch.testing.assert_close(got.start_logits, expected.start_logits)
        torch.testing.assert_close(got.end_logits, expected.end_logits)
        full = with_blockwise_fields(running, num_blocks=1, heads_per_shift=None)
        assert full(input_ids=input_ids).start_logits.shape == (2, 128)
    assert with_running_positions(running) is running


def test_the_report_shows_examples_scores_and_ratios(qa_folder):
    article = read_held_out_article(SQUAD_SAMPLE, HELD_OUT)
    article.questions = article.questions.select(range(2))
    held_out = evaluate_held_out(qa_folder, article, max_document_questions=1, num_examples=1)
    cost = measure_attention_cost(qa_folder, "Who founded Sky?", article.document, rounds=1, kernels=("sdpa",))
    report = format_report({"held_out": held_out, "efficiency": cost, "model": {"max_seq_length": 512}})
    assert f"Q: {article.questions[0]['question']}" in report
    assert "over the whole article" in report and "EM" in report and "F1" in report
    assert "BlockBERT n = 4 (1:1:1:1)" in report and "sdpa" in report


# ---------------------------------------------------------------------------------------------------------------------
# The command line's checks: bad options and folders stop it before any work
# ---------------------------------------------------------------------------------------------------------------------


@pytest.fixture
def demo_cli(monkeypatch):
    """experiments/demo.py as a module whose steps (the example scripts) must not start: a check that lets a bad
    option through fails the test at once instead of converting and fine-tuning."""

    def no_work(*args, **kwargs):
        raise AssertionError("the demo started its work")

    monkeypatch.setattr(demo, "run_script", no_work)
    monkeypatch.setattr(demo, "write_training_file", no_work)
    return demo


@pytest.mark.parametrize(
    "option, value, message",
    [
        ("--timing_rounds", "0", "--timing_rounds must be at least 1"),
        ("--max_document_questions", "-1", "--max_document_questions must be 0 (all) or more"),
        ("--max_train_articles", "0", "--max_train_articles must be at least 1"),
        ("--max_train_articles", "-1", "--max_train_articles must be at least 1"),
        ("--max_seq_length", "0", "--max_seq_length must be at least 1"),
        ("--num_blocks", "0", "--num_blocks must be at least 1"),
        ("--max_seq_length", "1025", "--max_seq_length 1025 is not a multiple of --num_blocks 2"),
        ("--heads_per_shift", "9:1:1", "--heads_per_shift 9:1:1 has 3 shift(s), --num_blocks is 2"),
        ("--heads_per_shift", "nine", "--heads_per_shift"),
        ("--train_window", "128", "--train_window must be more than 128"),
        ("--train_window", "512", "--train_window 512 fits in 1 block(s) of 512 tokens"),
        ("--train_window", "4096", "--train_window 4096 is longer than --max_seq_length 1024"),
        ("--negative_window_rate", "1.5", "--negative_window_rate must be in [0, 1]"),
        ("--paragraph_negative_rate", "-0.1", "--paragraph_negative_rate must be in [0, 1]"),
        ("--max_train_questions", "-1", "--max_train_questions must be 0 (all) or more"),
        ("--mixed_precision", "fp8", "--mixed_precision fp8 is unknown"),
        ("--window_layout", "question_last", "--window_layout: window_layout='question_last' is unknown"),
        ("--num_train_epochs", "0", "--num_train_epochs must be positive"),
        ("--learning_rate", "-1", "--learning_rate must be positive"),
        ("--per_device_train_batch_size", "0", "--per_device_train_batch_size must be at least 1"),
        ("--seed", "-1", "--seed must be 0 or more"),
        ("--source_model", "{tmp}/no-model", "--source_model {tmp}/no-model is not a model folder"),
    ],
)
def test_a_bad_option_stops_the_demo_before_any_work_naming_it(demo_cli, tmp_path, capsys, option, value, message):
    output_dir = tmp_path / "demo"
    with pytest.raises(SystemExit) as exit_info:
        demo_cli.main(["--output_dir", str(output_dir), option, value.format(tmp=tmp_path)])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert message.format(tmp=tmp_path) in error and "Traceback" not in error
    assert not output_dir.exists()


def test_a_source_model_folder_without_a_config_is_refused(demo_cli, tmp_path, capsys):
    (tmp_path / "weights").mkdir()
    with pytest.raises(SystemExit) as exit_info:
        demo_cli.main(["--output_dir", str(tmp_path / "demo"), "--source_model", str(tmp_path / "weights")])
    assert exit_info.value.code == 2 and "no config.json" in capsys.readouterr().err


@pytest.fixture
def blockbert_source(tmp_path, tokenizer):
    """A saved tiny BlockBERT encoder shaped as experiments/distilled_checkpoint.py saves its checkpoint: N = 512,
    n = 2, positions restarting in each block of 256, no pooler."""
    config = tiny_config(vocab_size=len(tokenizer), max_position_embeddings=514, heads_per_shift="3:1",
                         block_relative_positions=True, block_size=256)  # fmt: skip
    folder = tmp_path / "distilled"
    BlockBertModel(config, add_pooling_layer=False).save_pretrained(folder)
    match_tokenizer_to_config(copy.deepcopy(tokenizer), config).save_pretrained(folder)  # the fixture is shared
    return folder


def test_a_blockbert_source_keeps_its_weights_and_takes_the_demos_model_shape(blockbert_source, tmp_path):
    args = demo.DemoArguments(source_model=str(blockbert_source), heads_per_shift="3:1")
    demo.reshape(args, blockbert_source, tmp_path / "reshaped")
    config = BlockBertConfig.from_pretrained(tmp_path / "reshaped")
    assert (config.max_sequence_length, config.num_blocks, config.heads_per_shift) == (1024, 2, [3, 1])
    assert config.block_relative_positions and config.effective_block_size == 512
    source, reshaped = (load_file(folder / "model.safetensors") for folder in (blockbert_source, tmp_path / "reshaped"))
    assert source.keys() == reshaped.keys() and all(torch.equal(source[name], reshaped[name]) for name in source)
    assert AutoTokenizer.from_pretrained(tmp_path / "reshaped").model_max_length == 1024


@pytest.mark.parametrize(
    "options, message",
    [
        (["--block_relative_positions", "false"], "which give N = 512, not --max_seq_length 1024"),
        (["--max_seq_length", "2048", "--train_window", "1100"], "cannot take the demo's model shape"),
    ],
)
def test_a_blockbert_source_whose_positions_cannot_give_the_demos_n_is_refused(
    demo_cli, blockbert_source, tmp_path, capsys, options, message
):
    output_dir = tmp_path / "demo"
    with pytest.raises(SystemExit) as exit_info:
        demo_cli.main(["--output_dir", str(output_dir), "--source_model", str(blockbert_source),
                       "--heads_per_shift", "3:1", *options])  # fmt: skip
    error = capsys.readouterr().err
    assert exit_info.value.code == 2 and message in error and "Traceback" not in error
    assert not output_dir.exists()


def _demo_folder(folder, kind="blockbert-hf demo"):
    """A folder as an earlier demo left it: its data, its models, its results and report."""
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "train.json").write_text("{}")
    (folder / "converted").mkdir()
    (folder / "qa").mkdir()
    (folder / "results.json").write_text(json.dumps({"kind": kind, "command": "python experiments/demo.py"}))
    (folder / "report.md").write_text("# `make demo`, as run\n")
    return folder


def test_the_output_folder_guard_accepts_only_what_the_demo_wrote(demo_cli, tmp_path):
    demo_cli.check_output_dir(tmp_path / "new")  # a new folder
    (tmp_path / "empty").mkdir()
    demo_cli.check_output_dir(tmp_path / "empty")
    demo_cli.check_output_dir(_demo_folder(tmp_path / "earlier"))  # an earlier demo's: replaced by the rerun
    interrupted = tmp_path / "interrupted"  # a demo stopped before its results: its data and models only
    (interrupted / "data").mkdir(parents=True)
    (interrupted / "data" / "train.json").write_text("{}")
    (interrupted / "converted").mkdir()
    demo_cli.check_output_dir(interrupted)


REFUSED_FOLDERS = {
    "qa_comparison copy": lambda folder: shutil.copytree(REPO_ROOT / "results" / "qa_comparison", folder),
    "other kind": lambda folder: _demo_folder(folder, kind="something else"),
    "broken results": lambda folder: (_demo_folder(folder) / "results.json").write_text('{"kind": "blockbert-hf de'),
    "extra file": lambda folder: (_demo_folder(folder) / "notes.txt").write_text("mine"),
    "a file": lambda folder: folder.write_text("a file"),
}


@pytest.mark.parametrize("what", REFUSED_FOLDERS)
def test_the_output_folder_guard_refuses_any_other_folder(demo_cli, tmp_path, capsys, what):
    folder = tmp_path / "folder"
    REFUSED_FOLDERS[what](folder)
    before = sorted(path.relative_to(tmp_path) for path in tmp_path.rglob("*"))
    with pytest.raises(SystemExit) as exit_info:
        demo_cli.main(["--output_dir", str(folder)])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert f"--output_dir {folder}" in error and "Traceback" not in error
    assert sorted(path.relative_to(tmp_path) for path in tmp_path.rglob("*")) == before


@pytest.mark.parametrize("native", [True, False])
def test_auto_precision_is_bf16_only_where_the_cpu_computes_it(monkeypatch, native):
    monkeypatch.setattr(demo, "cpu_has_native_bf16", lambda: native)
    assert demo.training_precision("auto") == ("bf16" if native else "no")
    assert demo.training_precision("bf16") == "bf16" and demo.training_precision("no") == "no"
