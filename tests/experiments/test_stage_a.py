"""`experiments/offline_gpu/stage_a.sh` end to end on a tiny model and tiny budgets, as a GPU machine runs it (without
its setup): the corpus and QA sets from a packed data folder, the adaptation runs, the block-1 diagnostic, the
adapted QA cells in parallel and the archive of small results; then started again, it redoes nothing."""

import gzip
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import torch
from conftest import REPO_ROOT, SAMPLE_TEXT, tiny_roberta_source

from blockbert_hf import BlockBertForMaskedLM


SCRIPT = REPO_ROOT / "experiments" / "offline_gpu" / "stage_a.sh"
SQUAD_SAMPLE = REPO_ROOT / "data" / "samples" / "squad_v1.1_dev_sample.json"
DEV_TITLE = "Sky_(United_Kingdom)_copy"


def _write_gz(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write(text)


def _copy(article: dict) -> dict:
    """The article under another title, its question ids made unique."""
    paragraphs = [
        {**paragraph, "qas": [{**qa, "id": qa["id"] + "_copy"} for qa in paragraph["qas"]]}
        for paragraph in article["paragraphs"]
    ]
    return {**article, "title": article["title"] + "_copy", "paragraphs": paragraphs}


def _data_folder(folder: Path) -> Path:
    """A data folder as pack.sh packs it: WikiText-2 (the bundled sample), a novel, and SQuAD with four articles (the
    sample's two and a copy of each: the first half is then one training and one dev article)."""
    text = SAMPLE_TEXT.read_text(encoding="utf-8")
    _write_gz(folder / "corpus" / "wikitext-2" / "wiki.valid.tokens.gz", text)
    _write_gz(folder / "corpus" / "wikitext-2" / "wiki.test.tokens.gz", text)
    _write_gz(folder / "corpus" / "gutenberg" / "pg1.txt.gz", text.replace(" = ", " "))
    squad = json.loads(SQUAD_SAMPLE.read_text(encoding="utf-8"))
    first, second = squad["data"]
    copies = [_copy(article) for article in (first, second)]
    squad["data"] = [first, copies[0], second, copies[1]]
    _write_gz(folder / "squad" / "dev-v1.1.json.gz", json.dumps(squad))
    files = sorted(str(path.relative_to(folder)) for path in folder.rglob("*.gz"))
    sums = subprocess.run(["sha256sum", *files], cwd=folder, capture_output=True, text=True, check=True).stdout
    (folder / "SHA256SUMS").write_text(sums)
    return folder


def _run(tmp_path: Path, *steps: str, **variables: str) -> subprocess.CompletedProcess:
    python_bin = str(Path(sys.executable).parent)
    paths = [REPO_ROOT / "src", REPO_ROOT / "benchmarks", REPO_ROOT / "experiments"]
    env = {
        **os.environ,
        "PATH": f"{python_bin}:{os.environ['PATH']}",
        "PYTHONPATH": ":".join(str(path) for path in paths),
        "SKIP_SETUP": "1",
        "SOURCE_MODEL": str(tmp_path / "source"),
        "DATA": str(tmp_path / "data"),
        "STAGE_DIR": str(tmp_path / "stage"),
        "QA_RESULTS_DIR": str(tmp_path / "results"),
        "OUT": str(tmp_path / "out"),
        "REFERENCE_TOKENS": "2048",
        "ADAPTATION_TOKENS": "2048",
        "TOKENS_PER_BATCH": "1024",
        "TOKENS_PER_MICRO_BATCH": "1024",
        "EVALUATIONS": "1",
        "DIAGNOSTIC_SEQUENCES": "4",
        "MIXED_PRECISION": "no",
        "QA_JOBS": "2",
        "CORPUS_ARGS": f"--dev_titles {DEV_TITLE}",
        "SETS_ARGS": f"--dev_titles {DEV_TITLE}",
        "ADAPT_ARGS": "--max_eval_sequences 4 --threads 1",
        "QA_ARGS": "--mixed_precision no --max_train_samples 4 --max_eval_samples 2 --effective_batch_size 4 "
        "--train_tokens_per_batch 1024 --eval_tokens_per_batch 2048 --bootstrap_samples 50 --threads 1 "
        "--preprocessing_num_workers 1 --num_train_epochs 1",
        **variables,
    }
    return subprocess.run(
        ["bash", str(SCRIPT), *steps], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=1200
    )


def _stage_inputs(tmp_path, tokenizer):
    """The data and the tiny source model a stage reads, under `tmp_path`; skips without coreutils."""
    if shutil.which("sha256sum") is None or shutil.which("timeout") is None:
        pytest.skip("needs coreutils' sha256sum and timeout")
    _data_folder(tmp_path / "data")
    tiny_roberta_source(tmp_path / "source", tokenizer)


@pytest.mark.slow
def test_stage_a_runs_every_step_then_redoes_nothing(tmp_path, tokenizer):
    _stage_inputs(tmp_path, tokenizer)
    done = _run(tmp_path, "prepare", "adapt", "diagnose", "qa", "collect")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]

    with tarfile.open(tmp_path / "out" / "stage_a.tar.gz") as archive:
        names = archive.getnames()
        results = json.load(
            archive.extractfile(next(n for n in names if n.endswith("adapted_n512_n2_10-2_seed1/results.json")))
        )
    assert any(name.endswith("adaptation/adaptation_results.json") for name in names)
    assert any(name.endswith("adaptation/diagnostic_n512_n2_10-2.json") for name in names)
    assert any(name.endswith("adaptation/diagnostic_full_n512.json") for name in names)
    assert any(name.endswith("results/README.md") for name in names)
    assert not any(name.endswith((".safetensors", ".bin", ".pt")) for name in names)  # no weights
    # the cell started from the adapted 10:2 model, and its commands say so
    assert results["finished"] and results["source_model"]["adapted_from"] == "n512_n2_10-2"
    assert results["source_model"]["config_overrides"] == {}
    assert results["commands"][0].startswith(
        "# $WORK_DIR/models/blockwise-N512-n2-10_2-from-n512_n2_10-2: a copy of $ADAPTATION_DIR/runs/n512_n2_10-2/"
        "final_model"
    )
    assert "--model_name_or_path $WORK_DIR/models/blockwise-N512-n2-10_2-from-n512_n2_10-2" in results["commands"][1]

    again = _run(tmp_path, "prepare", "adapt", "diagnose", "qa")
    assert again.returncode == 0, again.stdout[-4000:] + again.stderr[-4000:]
    assert "done already" in again.stdout and "Running:" not in again.stderr + again.stdout


@pytest.mark.slow
def test_adapted_models_come_back_in_parts_and_a_new_machine_goes_on_from_them(tmp_path, tokenizer):
    _stage_inputs(tmp_path, tokenizer)
    runs = {"ADAPT_RUNS": "reference n512_n2_10-2"}
    done = _run(tmp_path, "prepare", "adapt", "weights", "collect", **runs)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    brought_back = sorted(path.name for path in (tmp_path / "out").iterdir())
    assert brought_back[-1] == "stage_a.tar.gz" and all(name.endswith(".safetensors") for name in brought_back[:-1])
    assert any(name.startswith("n512_n2_10-2.part-") for name in brought_back)
    trained = tmp_path / "stage" / "adaptation" / "runs" / "n512_n2_10-2" / "final_model"
    trained_state = BlockBertForMaskedLM.from_pretrained(trained).state_dict()

    # A new machine: nothing of the stage is left but what came back.
    shutil.rmtree(tmp_path / "stage")
    (tmp_path / "out").rename(tmp_path / "weights")
    again = _run(tmp_path, "prepare", "restore", "adapt", "diagnose", WEIGHTS_DIR=str(tmp_path / "weights"), **runs)
    assert again.returncode == 0, again.stdout[-4000:] + again.stderr[-4000:]
    assert "restoring n512_n2_10-2" in again.stdout and "n512_n2_10-2: done already" in again.stdout
    assert "pre-training" not in again.stderr  # no run trained again
    restored_state = BlockBertForMaskedLM.from_pretrained(trained).state_dict()
    for name, tensor in trained_state.items():
        assert torch.equal(restored_state[name], tensor.to(torch.bfloat16).float()) or torch.equal(
            restored_state[name], tensor
        ), name
    assert (tmp_path / "stage" / "adaptation" / "diagnostic_n512_n2_10-2.json").is_file()
