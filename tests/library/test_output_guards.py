"""An output that is, or holds, an input of the script writing it is refused before any work, with or without an
overwrite option (`blockbert_hf.saving.check_output_keeps_inputs`), by every script that writes a folder."""

import json
import re
import sys

import pytest
from conftest import REPO_ROOT, SAMPLE_TEXT, load_script, make_model, tiny_config

from blockbert_hf import BlockBertForMaskedLM, BlockBertForQuestionAnswering
from blockbert_hf.saving import OutputOverwritesInputError, check_output_keeps_inputs
from blockbert_hf.train.pretraining import trainer
from blockbert_hf.train.qa import finetuning


SQUAD_V1 = REPO_ROOT / "data" / "samples" / "squad_v1.1_dev_sample.json"


def _files(folder):
    return {path.relative_to(folder): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


@pytest.fixture
def source(tmp_path):
    folder = tmp_path / "parent" / "model"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    return folder


def test_an_output_that_is_or_holds_an_input_is_refused(source, tmp_path, monkeypatch):
    inputs = {"--model": source, "--tokenizer": None, "--train_files": [SAMPLE_TEXT]}
    for output, relation in ((source, "is"), (source.parent, "holds"), (tmp_path, "holds")):
        with pytest.raises(OutputOverwritesInputError, match=f"OUT {output} {relation} --model {source}: "):
            check_output_keeps_inputs(output, inputs, output_name="OUT")
    with pytest.raises(OutputOverwritesInputError, match="holds --train_files"):
        check_output_keeps_inputs(SAMPLE_TEXT.parent, inputs)
    (tmp_path / "link").symlink_to(source, target_is_directory=True)
    with pytest.raises(OutputOverwritesInputError, match="is --model"):
        check_output_keeps_inputs(tmp_path / "link", inputs)
    with pytest.raises(OutputOverwritesInputError, match="is --model .*link: "):  # a link given as the input
        check_output_keeps_inputs(source, {"--model": tmp_path / "link"})
    monkeypatch.chdir(source)
    with pytest.raises(OutputOverwritesInputError, match=r"the output \.\. holds --model \.\./model: "):
        check_output_keeps_inputs("..", {"--model": "../model"})


def test_an_output_beside_or_inside_an_input_and_a_hub_id_are_allowed(source, tmp_path, monkeypatch):
    inputs = {"--model": source, "--file": source / "config.json"}
    for output in (source.parent / "out", source / "out", tmp_path / "elsewhere" / "out"):
        check_output_keeps_inputs(output, inputs)
    monkeypatch.chdir(tmp_path)
    check_output_keeps_inputs(".", {"--model_name_or_path": "org/model"})  # not a local path: nothing to destroy


@pytest.mark.parametrize("where", ["same", "parent"])
def test_export_onnx_refuses_to_write_over_its_model(where, tmp_path, tokenizer, capsys):
    model = tmp_path / "parent" / "model"
    make_model(BlockBertForQuestionAnswering, tiny_config(vocab_size=len(tokenizer))).save_pretrained(model)
    tokenizer.save_pretrained(model)
    before = _files(tmp_path)
    output = model if where == "same" else model.parent
    with pytest.raises(SystemExit) as exited:
        load_script("examples/export_onnx.py").main([str(model), str(output), "--overwrite"])
    assert exited.value.code == 2
    assert f"{'is' if where == 'same' else 'holds'} model_folder" in capsys.readouterr().err
    assert _files(tmp_path) == before


@pytest.mark.parametrize("where", ["same", "parent"])
def test_run_qa_refuses_an_output_dir_that_is_or_holds_the_model_before_any_work(where, tmp_path, monkeypatch, capsys):
    model = tmp_path / "parent" / "model"
    make_model(BlockBertForQuestionAnswering, tiny_config(vocab_size=120)).save_pretrained(model)
    before = _files(tmp_path)
    monkeypatch.setattr(finetuning, "_load_model_and_tokenizer", lambda config: pytest.fail("work started"))
    output = model if where == "same" else model.parent
    argv = ["--model_name_or_path", model, "--train_file", SQUAD_V1, "--do_train", "--output_dir", output]
    assert load_script("examples/run_qa.py").main([str(arg) for arg in [*argv, "--overwrite_output_dir"]]) == 2
    assert re.search("--output_dir .* --model_name_or_path", capsys.readouterr().err)
    assert _files(tmp_path) == before


@pytest.mark.parametrize("where", ["same", "parent"])
def test_run_mlm_refuses_an_output_dir_that_is_or_holds_the_model_before_any_work(where, tmp_path, monkeypatch, capsys):
    model = tmp_path / "parent" / "model"
    make_model(BlockBertForMaskedLM, tiny_config(vocab_size=120)).save_pretrained(model)
    before = _files(tmp_path)
    monkeypatch.setattr(trainer, "_run", lambda *args: pytest.fail("work started"))
    output = model if where == "same" else model.parent
    argv = ["--model_name_or_path", model, "--train_files", SAMPLE_TEXT, "--output_dir", output, "--max_seq_length", 64]
    assert load_script("examples/run_mlm.py").main([str(arg) for arg in [*argv, "--max_train_steps", 1]]) == 2
    assert re.search("--output_dir .* --model_name_or_path", capsys.readouterr().err)
    assert _files(tmp_path) == before


@pytest.mark.parametrize("script", ["demo", "build_long_context_qa"])
def test_experiment_scripts_refuse_an_output_dir_that_holds_their_input(script, tmp_path, monkeypatch, capsys):
    """The demo rerun from the model its earlier run converted; the long-context sets written over their SQuAD
    file's folder."""
    data = tmp_path / "out"
    if script == "demo":
        (data / "converted").mkdir(parents=True)
        (data / "converted" / "config.json").write_text("{}")
        (data / "results.json").write_text(json.dumps({"kind": "blockbert-hf demo"}))  # an earlier demo's folder
        argv = ["--output_dir", data, "--source_model", data / "converted"]
        option = "--source_model"
    else:
        data.mkdir()
        (data / "dev.json").write_bytes(SQUAD_V1.read_bytes())
        (tmp_path / "tokenizer").mkdir()
        argv = ["--squad_file", data / "dev.json", "--tokenizer", tmp_path / "tokenizer", "--output_dir", data]
        argv.append("--overwrite_output_dir")
        option = "--squad_file"
    before = _files(tmp_path)
    module = load_script(f"experiments/{script}.py")
    # the demo's script is a command line over its experiments module; build_long_context_qa's is its own
    logic = sys.modules.get(module.main.__module__, module)
    monkeypatch.setattr(logic, "run_script" if script == "demo" else "AutoTokenizer", None)  # any work fails
    with pytest.raises(SystemExit) as exited:
        module.main([str(arg) for arg in argv])
    assert exited.value.code == 2
    assert f"--output_dir {data} holds {option}" in capsys.readouterr().err
    assert _files(tmp_path) == before


@pytest.mark.parametrize("output", ["--work_dir", "--results_dir"])
def test_the_qa_comparison_refuses_an_output_that_holds_its_data(output, tmp_path, capsys):
    data = tmp_path / "work" / "long_qa_data"
    data.mkdir(parents=True)
    (data / "manifest.json").write_text("{}")
    before = _files(tmp_path)
    argv = ["run", "--data_dir", data, output, tmp_path / "work", "--dry_run"]
    assert load_script("experiments/qa_comparison.py").main([str(arg) for arg in argv]) == 2
    assert f"{output} {tmp_path / 'work'} holds --data_dir {data}" in capsys.readouterr().err
    assert _files(tmp_path) == before


@pytest.mark.parametrize("script", ["run_qa.py", "run_mlm.py"])
def test_training_scripts_refuse_an_output_dir_that_holds_their_data(script, tmp_path, monkeypatch, capsys):
    """`--overwrite_output_dir` would start over in the folder that holds the data, and the run write beside it."""
    data = tmp_path / "data"
    data.mkdir()
    model = tmp_path / "model"
    make_model(BlockBertForQuestionAnswering, tiny_config(vocab_size=120)).save_pretrained(model)
    if script == "run_qa.py":
        (data / "dev.json").write_bytes(SQUAD_V1.read_bytes())
        option, argv = "--validation_file", ["--model_name_or_path", model, "--do_eval"]
        argv += ["--validation_file", data / "dev.json", "--output_dir", data]
        monkeypatch.setattr(finetuning, "_load_model_and_tokenizer", lambda config: pytest.fail("work started"))
    else:
        (data / "train.txt").write_bytes(SAMPLE_TEXT.read_bytes())
        option, argv = "--train_files", ["--model_name_or_path", model, "--max_train_steps", 1, "--max_seq_length", 64]
        argv += ["--train_files", data / "train.txt", "--output_dir", data]
        monkeypatch.setattr(trainer, "_run", lambda *args: pytest.fail("work started"))
    before = _files(tmp_path)
    status = load_script(f"examples/{script}").main([str(arg) for arg in [*argv, "--overwrite_output_dir"]])
    assert status == 2
    assert f"--output_dir {data} holds {option} {data / ('dev.json' if script == 'run_qa.py' else 'train.txt')}" in (
        capsys.readouterr().err
    )
    assert _files(tmp_path) == before
