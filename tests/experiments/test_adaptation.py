"""The adaptation chain (`experiments/adaptation.py`) end to end on a tiny RoBERTa without an MLM head: conversion,
the head trained alone, pattern runs that start from that head at their own N, a run sliced and resumed, finished
runs skipped, the results and their recorded commands; and its refusals before any work."""

import json

import pytest
from conftest import SAMPLE_TEXT, load_script, tiny_roberta_source
from safetensors.torch import load_file

from blockbert_benchmarks.measuring.machine import machine_description


adaptation = load_script("experiments/adaptation.py")


def _argv(tmp_path, *extra) -> list[str]:
    return [
        "--source_model", str(tmp_path / "source"), "--output_dir", str(tmp_path / "adaptation"),
        "--train_files", str(SAMPLE_TEXT), "--validation_files", str(SAMPLE_TEXT), "--document_boundary", "heading",
        "--reference_tokens", "4096", "--adaptation_tokens", "4096", "--tokens_per_batch", "2048",
        "--tokens_per_micro_batch", "1024", "--evaluations", "2", "--max_eval_sequences", "4", "--in_process",
        *extra,
    ]  # fmt: skip


def _commands(tmp_path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "adaptation" / adaptation.COMMANDS_FILE).read_text().splitlines()]


def test_the_chain_converts_trains_the_head_and_continues_each_pattern_from_it(tmp_path, tokenizer, capsys):
    tiny_roberta_source(tmp_path / "source", tokenizer)
    assert adaptation.main(_argv(tmp_path, "--runs", "reference", "full_n512", "n1024_n2_10-2")) == 0
    output = tmp_path / "adaptation"
    results = json.loads((output / adaptation.RESULTS_JSON).read_text())
    runs = results["runs"]
    assert results["machine"] == machine_description()
    assert list(runs) == ["reference", "full_n512", "n1024_n2_10-2"] and all(run["finished"] for run in runs.values())
    assert runs["reference"]["trained_parameters"].startswith("the MLM head only")
    assert runs["full_n512"]["trained_parameters"].startswith("every parameter but the word embeddings")
    # The control starts from the reference's final model: its step-0 held-out loss is the reference's final one.
    assert runs["full_n512"]["held_out_loss_before"] == pytest.approx(runs["reference"]["held_out_loss"], rel=1e-6)
    assert runs["n1024_n2_10-2"]["max_seq_length"] == 1024
    reference_head = load_file(output / "runs" / "reference" / "final_model" / "model.safetensors")
    start = load_file(output / "converted" / "model.safetensors")
    assert reference_head["roberta.encoder.layer.0.attention.self.query.weight"].equal(
        start["roberta.encoder.layer.0.attention.self.query.weight"]
    )
    assert [len(run["held_out_loss_curve"]) for run in runs.values()] == [3, 3, 3]  # before, after step 1, at the end
    assert (output / adaptation.CURVES_PNG).stat().st_size > 0

    # Commands: one per step, recorded without a path of this machine.
    commands = _commands(tmp_path)
    assert [record["run"] for record in commands] == ["converted", "reference", "full_n512", "n1024_n2_10-2"]
    assert commands[0]["command"].startswith("python examples/convert_roberta_to_blockbert.py $SOURCE_MODEL ")
    assert "--model_name_or_path $OUTPUT_DIR/runs/reference/final_model" in commands[2]["command"]
    assert str(tmp_path) not in (output / adaptation.RESULTS_JSON).read_text()
    assert runs["full_n512"]["commands"] == [commands[2]["command"]]

    # A run sliced at a checkpoint step stops there and resumes from it; finished runs are skipped.
    sliced = ["--runs", "n512_n2_10-2", "--stop_after_step", "1"]
    assert adaptation.main(_argv(tmp_path, *sliced)) == 0
    assert not (output / "runs" / "n512_n2_10-2" / "results.json").exists()
    four = ["--runs", "reference", "full_n512", "n512_n2_10-2", "n1024_n2_10-2"]
    assert adaptation.main(_argv(tmp_path, *four)) == 0
    commands = _commands(tmp_path)
    assert [record["run"] for record in commands[4:]] == ["n512_n2_10-2", "n512_n2_10-2"]
    assert commands[5]["command"].endswith("--resume") and "--resume" not in commands[4]["command"]
    results = json.loads((output / adaptation.RESULTS_JSON).read_text())
    assert list(results["runs"]) == [name for name in adaptation.RUN_NAMES if name in four]
    assert all(run["finished"] for run in results["runs"].values())
    capsys.readouterr()
    assert adaptation.main(_argv(tmp_path, *four)) == 0
    assert len(_commands(tmp_path)) == 6 and "reference: done already" in capsys.readouterr().out


def test_the_chain_refuses_bad_options_before_any_work(tmp_path, tokenizer, capsys):
    tiny_roberta_source(tmp_path / "source", tokenizer)
    refusals = {
        ("--stop_after_step", "2"): "--stop_after_step stops one run",
        (
            "--runs",
            "reference",
            "--stop_after_step",
            "1",
            "--evaluations",
            "1",
        ): "is not a checkpoint step of reference",
        ("--tokens_per_batch", "1536"): "is not a multiple of N = 1024",
        ("--runs", "longformer"): "Unknown runs ['longformer']",
    }
    for extra, message in refusals.items():
        assert adaptation.main(_argv(tmp_path, *extra)) == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "adaptation").exists()

    assert adaptation.main(_argv(tmp_path, "--dry_run")) == 0
    printed = capsys.readouterr().out
    assert [line.split(":")[0] for line in printed.splitlines()] == ["converted", *adaptation.RUN_NAMES]
    assert "--block_relative_positions" in printed and not (tmp_path / "adaptation").exists()

    # A folder where a chain with other budgets ran is refused; the runs to do and the slicing may change.
    (args,) = adaptation.build_parser().parse_args_into_dataclasses(args=_argv(tmp_path))
    adaptation.prepare(args)
    (tmp_path / "adaptation" / "runs").mkdir()  # what a start that ran leaves
    assert adaptation.main(_argv(tmp_path, "--adaptation_tokens", "8192", "--dry_run", "--runs", "reference")) == 0
    capsys.readouterr()
    assert adaptation.main(_argv(tmp_path, "--adaptation_tokens", "8192", "--runs", "reference")) == 2
    assert "--adaptation_tokens 4096 there, 8192 now" in capsys.readouterr().err
