"""The training scripts (`examples/run_qa.py`, `examples/run_mlm.py`) refuse bad options, inputs and output folders
before any work, with exit status 2 and one line naming the option or file, as the converter and the export script
do; a run that would not train is refused rather than saved as trained; a run refused or failed before training
does not block its own retry; option values that start with a minus sign reach their option in every example
script."""

import gzip
import json
import os
import subprocess
import sys

import pytest
import torch
from conftest import REPO_ROOT, SAMPLE_TEXT, load_script, tiny_config

from blockbert_hf import BlockBertForQuestionAnswering
from blockbert_hf.saving import save_atomically
from blockbert_hf.tokenization import match_tokenizer_to_config
from blockbert_hf.train.pretraining import trainer
from blockbert_hf.train.qa import evaluation, finetuning


SQUAD_V1 = REPO_ROOT / "data" / "samples" / "squad_v1.1_dev_sample.json"
SQUAD_V2 = REPO_ROOT / "data" / "samples" / "squad_v2.0_dev_sample.json"
RUN_ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def _no_work(*args, **kwargs):
    pytest.fail("work started")


def _run_script(script: str, argv, capsys) -> tuple[int, str]:
    """`examples/{script}.main(argv)` in this process: its exit status and what it printed to stderr."""
    status = load_script(f"examples/{script}").main([str(arg) for arg in argv])
    return status, capsys.readouterr().err


def _refused(status: int, stderr: str, *named: str, alone: bool = True) -> str:
    """Asserts a refusal: status 2 and one line `error: ...` naming every string of `named`, the only line printed
    (`alone`) or the last one, after the progress bars of the work it needed (loading the model, reading the data)."""
    lines = stderr.strip().splitlines()
    assert status == 2 and lines[-1].startswith("error: ") and "Traceback" not in stderr, (status, stderr)
    assert len(lines) == 1 or not alone, stderr
    for name in named:
        assert name in lines[-1], (name, lines[-1])
    return lines[-1]


@pytest.fixture(scope="module")
def qa_model(tmp_path_factory, tokenizer):
    """A tiny BlockBERT QA model (N = 64) with its tokenizer."""
    config = tiny_config(vocab_size=len(tokenizer))
    match_tokenizer_to_config(tokenizer, config)
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("qa_model") / "tiny"
    save_atomically(folder, BlockBertForQuestionAnswering(config).save_pretrained, tokenizer.save_pretrained)
    return folder


def _qa_argv(model, output_dir, *extra) -> list:
    return ["--model_name_or_path", model, "--output_dir", output_dir, "--doc_stride", 16, *extra]


def _mlm_argv(output_dir, *extra) -> list:
    return [
        "--output_dir", output_dir, "--train_files", SAMPLE_TEXT, "--document_boundary", "heading",
        "--train_tokenizer_vocab_size", 600, "--max_seq_length", 64, "--num_hidden_layers", 1, "--hidden_size", 32,
        "--num_attention_heads", 4, "--num_blocks", 2, "--tokens_per_batch", 256, "--per_device_train_batch_size", 4,
        "--max_train_steps", 1, "--report_to", "none", *extra,
    ]  # fmt: skip


# ---------------------------------------------------------------------------------------------------------------------
# A run that would not train is refused, not saved as trained
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "named"),
    [
        (["--num_train_epochs", 0], "--num_train_epochs"),
        (["--num_train_epochs", -1], "--num_train_epochs"),
        (["--learning_rate", 0, "--max_train_steps", 1], "--learning_rate"),
        (["--max_grad_norm", 0, "--max_train_steps", 1], "--max_grad_norm"),
        (["--max_train_steps", 0, "--num_train_epochs", 1], "--max_train_steps"),
    ],
)
def test_run_qa_refuses_a_run_that_would_not_train(options, named, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(finetuning, "_load_model_and_tokenizer", _no_work)
    argv = _qa_argv(tmp_path / "model", tmp_path / "out", "--train_file", SQUAD_V1, "--do_train", *options)
    _refused(*_run_script("run_qa.py", argv, capsys), named)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("options", "named"),
    [
        (["--mlm_probability", 0], "--mlm_probability"),
        (["--learning_rate", 0], "--learning_rate"),
        (["--max_train_steps", 0], "--max_train_steps"),
    ],
)
def test_run_mlm_refuses_a_run_that_would_not_train(options, named, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(trainer, "load_training_data", _no_work)
    _refused(*_run_script("run_mlm.py", _mlm_argv(tmp_path / "out", *options), capsys), named)
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------------------------------------------
# Bad options and inputs: status 2, one line, before any work
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "named"),
    [
        (["--do_eval", "--max_answer_length", 0], "--max_answer_length"),
        (["--do_eval", "--n_best_size", 0], "--n_best_size"),
        (["--do_train", "--learning_rate=-1"], "--learning_rate"),
        (["--do_train", "--gradient_accumulation_steps", 0], "--gradient_accumulation_steps"),
        (["--do_train", "--logging_steps", 0], "--logging_steps"),
        (["--do_eval", "--doc_stride", -1], "--doc_stride"),
        (["--do_train", "--train_file", "missing.json"], "missing.json"),
    ],
)
def test_run_qa_refuses_bad_options_before_loading_the_model(options, named, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(finetuning, "_load_model_and_tokenizer", _no_work)
    argv = _qa_argv(tmp_path / "model", tmp_path / "out", "--train_file", SQUAD_V1, "--validation_file", SQUAD_V1)
    _refused(*_run_script("run_qa.py", [*argv, *options], capsys), named)
    assert not (tmp_path / "out").exists()


def _squad_file(path, paragraphs) -> str:
    path.write_text(json.dumps({"version": "1.1", "data": [{"title": "t", "paragraphs": paragraphs}]}))
    return str(path)


@pytest.mark.parametrize(
    "case",
    ["squad_2_without_version_2", "question_too_long", "stride_too_long", "malformed", "empty", "missing_model"],
)
def test_run_qa_refuses_bad_inputs_before_training_or_inference(case, qa_model, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(finetuning, "_set_up_training", _no_work)
    monkeypatch.setattr(evaluation, "_eval_loop", _no_work)
    model, data, options, named = qa_model, SQUAD_V1, ["--max_eval_samples", 4], ()
    if case == "squad_2_without_version_2":
        data, options, named = SQUAD_V2, ["--version_2_with_negative", "False"], ("--version_2_with_negative", "SQuAD")
    elif case == "question_too_long":
        options, named = ["--max_seq_length", 8, "--doc_stride", 2], ("max_seq_len = 8", f"--validation_file {data}")
    elif case == "stride_too_long":
        options, named = ["--doc_stride", 64], ("--doc_stride",)
    elif case == "malformed":
        (tmp_path / "bad.json").write_text('{"data": [')
        data, named = tmp_path / "bad.json", (str(tmp_path / "bad.json"), "invalid JSON")
    elif case == "empty":
        data, named = _squad_file(tmp_path / "empty.json", []), (str(tmp_path / "empty.json"),)
    else:
        model, named = tmp_path / "no_such_model", ("--model_name_or_path", str(tmp_path / "no_such_model"))
    argv = _qa_argv(model, tmp_path / "out", "--validation_file", data, "--do_eval", *options)
    _refused(*_run_script("run_qa.py", argv, capsys), *named, alone=case == "missing_model")


@pytest.mark.parametrize(
    ("options", "named"),
    [
        (["--heads_per_shift", "5:5"], "heads_per_shift"),
        (["--hidden_size", 30], "hidden_size"),
        (["--learning_rate=-1"], "--learning_rate"),
        (["--document_heading_regex", "(["], "--document_heading_regex"),
        (["--logging_steps", 0], "--logging_steps"),
        (["--validation_files", "missing.txt"], "missing.txt"),
        (["--tokens_per_batch", 100], "tokens_per_batch"),
    ],
)
def test_run_mlm_refuses_bad_options_before_reading_the_data(options, named, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(trainer, "load_training_data", _no_work)
    monkeypatch.setattr(trainer, "prepare_tokenizer", _no_work)
    _refused(*_run_script("run_mlm.py", _mlm_argv(tmp_path / "out", *options), capsys), named)
    assert not (tmp_path / "out").exists()


def test_run_mlm_refuses_bad_data_with_one_line(tmp_path, monkeypatch, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    argv = _mlm_argv(tmp_path / "out", "--train_files", empty)
    _refused(*_run_script("run_mlm.py", argv, capsys), "hold no text")
    (tmp_path / "bad.jsonl").write_text('{"text": "a"}\n{"text": \n')
    argv = _mlm_argv(tmp_path / "out2", "--train_files", tmp_path / "bad.jsonl")
    _refused(*_run_script("run_mlm.py", argv, capsys), f"{tmp_path / 'bad.jsonl'}:2")


@pytest.mark.parametrize("output", ["is_a_file", "over_the_model"])
def test_training_scripts_refuse_an_unusable_output_dir_with_one_line(output, qa_model, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(finetuning, "_load_model_and_tokenizer", _no_work)
    monkeypatch.setattr(trainer, "load_training_data", _no_work)
    if output == "is_a_file":
        target = tmp_path / "a_file"
        target.write_text("not a folder")
    else:
        target = qa_model
    qa_argv = _qa_argv(qa_model, target, "--validation_file", SQUAD_V1, "--do_eval", "--overwrite_output_dir")
    _refused(*_run_script("run_qa.py", qa_argv, capsys), "--output_dir", str(target))
    mlm_argv = _mlm_argv(target, "--model_name_or_path", qa_model, "--overwrite_output_dir")
    _refused(*_run_script("run_mlm.py", mlm_argv, capsys), "--output_dir", str(target))


@pytest.mark.parametrize("script", ["run_qa.py", "run_mlm.py"])
def test_a_refusal_from_the_command_line_is_one_line_and_status_2(script, tmp_path):
    """The scripts as users run them: no traceback, status 2, the error last (`--learning_rate -1e-3` is read as a
    value, not as an option)."""
    if script == "run_qa.py":
        argv = _qa_argv(tmp_path / "m", tmp_path / "out", "--train_file", SQUAD_V1, "--do_train")
    else:
        argv = _mlm_argv(tmp_path / "out")
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "examples" / script), *map(str, argv), "--learning_rate", "-1e-3"],
        capture_output=True,
        text=True,
        env=RUN_ENV,
        timeout=300,
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1].startswith("error: --learning_rate must be")
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------------------------------------------
# A run that failed before training does not block its retry
# ---------------------------------------------------------------------------------------------------------------------


def test_a_qa_run_that_failed_before_training_does_not_block_its_retry(qa_model, tmp_path, monkeypatch, capsys):
    output = tmp_path / "out"
    argv = _qa_argv(qa_model, output, "--train_file", SQUAD_V1, "--do_train", "--max_train_steps", 1)
    status, _ = _run_script("run_qa.py", [*argv, "--doc_stride", 64], capsys)  # refused once N is known
    assert status == 2

    started = []
    monkeypatch.setattr(finetuning, "_run", lambda config, *_: started.append(config) or {})
    status, stderr = _run_script("run_qa.py", argv, capsys)  # the same folder, the option fixed
    assert status == 0 and len(started) == 1, stderr


def test_an_mlm_run_that_failed_after_training_its_tokenizer_does_not_block_its_retry(tmp_path, monkeypatch, capsys):
    short = tmp_path / "short.txt"
    short.write_text(" = Title = \n" + "A short text of a few words .\n" * 6)
    argv = _mlm_argv(tmp_path / "out", "--train_files", short)
    status, stderr = _run_script("run_mlm.py", [*argv, "--tokens_per_batch", 4096], capsys)  # not one batch of text
    assert status == 2 and "fewer than one batch" in stderr
    assert (tmp_path / "out" / "tokenizer").is_dir()

    started = []
    monkeypatch.setattr(trainer, "_run", lambda *args: started.append(args) or {})
    status, stderr = _run_script("run_mlm.py", argv, capsys)
    assert status == 0 and len(started) == 1, stderr


# ---------------------------------------------------------------------------------------------------------------------
# Option values that start with a minus sign
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("script", "argv", "option", "value"),
    [
        ("convert_roberta_to_blockbert.py", ["source", "out", "--heads_per_shift", "-1:5"], "heads_per_shift", "-1:5"),
        ("convert_roberta_to_blockbert.py", ["source", "out", "--num_blocks", "-2"], "num_blocks", -2),
        ("run_qa.py", ["--model_name_or_path", "m", "--output_dir", "o", "--learning_rate", "-1e-3"], "learning_rate",
         -1e-3),
        ("run_mlm.py", ["--output_dir", "o", "--heads_per_shift", "-1:5"], "heads_per_shift", "-1:5"),
        ("run_mlm.py", ["--output_dir", "o", "--learning_rate", "-.5e-3"], "learning_rate", -0.5e-3),
        ("export_onnx.py", ["model", "out", "--text_file", "-1.txt"], "text_file", "-1.txt"),
        ("evaluate_mlm.py", ["model", "--validation_files", "-1.txt", "-2.txt"], "validation_files",
         ["-1.txt", "-2.txt"]),
    ],
)  # fmt: skip
def test_option_values_that_start_with_a_minus_sign_reach_their_option(script, argv, option, value):
    parser = load_script(f"examples/{script}").build_parser()
    if script == "convert_roberta_to_blockbert.py":
        parsed = parser.parse_args(argv)
    else:
        parsed = parser.parse_args_into_dataclasses(args=argv)[0]
    assert getattr(parsed, option) == value


# ---------------------------------------------------------------------------------------------------------------------
# export_onnx.py --text_file
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".txt", ".txt.gz"])
def test_export_onnx_names_a_text_file_that_is_not_utf8_before_any_work(suffix, tmp_path, monkeypatch, capsys):
    text_file = tmp_path / f"latin1{suffix}"
    data = "Caf\u00e9 au lait, na\u00efve r\u00e9sum\u00e9.".encode("latin-1")
    text_file.write_bytes(gzip.compress(data) if suffix.endswith(".gz") else data)
    module = load_script("examples/export_onnx.py")
    monkeypatch.setattr(module, "export_onnx_command", _no_work)
    with pytest.raises(SystemExit) as exited:
        module.main([str(tmp_path / "model"), str(tmp_path / "out"), "--text_file", str(text_file)])
    assert exited.value.code == 2
    message = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"--text_file {text_file}" in message and "UTF-8" in message
    assert not (tmp_path / "out").exists()
