"""`benchmarks/gpu_efficiency.py`, the GPU efficiency tables in one time-boxed run, tried on the CPU at tiny sizes:
the results' structure, ratios taken from the rows, parts cut at their budget and recorded as such, the largest-batch
search and its out-of-memory probes, and the table beside the paper's figures. Nothing here asserts speed."""

import copy
import itertools
import json
import os
import shutil
import subprocess
import sys
import time

import pytest
import torch
from conftest import REPO_ROOT, load_script
from transformers import RobertaConfig

from blockbert_benchmarks import largest_batch
from blockbert_benchmarks.largest_batch import TrainingStepProbe, search_largest_batch
from blockbert_benchmarks.measuring.timing import median_paired_ratio
from blockbert_benchmarks.models import ModelSize


SCRIPT = "benchmarks/gpu_efficiency.py"
SQUAD_SAMPLE = REPO_ROOT / "data" / "samples" / "squad_v1.1_dev_sample.json"


@pytest.fixture(scope="module")
def script():
    return load_script(SCRIPT)


@pytest.fixture
def long_document_inputs(tmp_path, tokenizer):
    """A tiny RoBERTa source (12 heads: the shifts 10:2 and 6:2:2:2) with its tokenizer, and an article set."""
    source, data = tmp_path / "source", tmp_path / "data"
    config = RobertaConfig(
        vocab_size=len(tokenizer), hidden_size=24, num_hidden_layers=1, num_attention_heads=12, intermediate_size=48,
        max_position_embeddings=130, pad_token_id=1, bos_token_id=0, eos_token_id=2,
    )  # fmt: skip
    config.save_pretrained(source)
    copy.deepcopy(tokenizer).save_pretrained(source)
    data.mkdir()
    shutil.copy(SQUAD_SAMPLE, data / "article.json")
    return ["--long_document_data", str(data), "--long_document_source", str(source)]


def _rows(results, part):
    return [
        (section, key, row) for section in results["parts"][part]["sections"] for key, row in section["rows"].items()
    ]


def test_section_ratios_come_from_the_rows(script):
    rows = {
        "blockbert-n2-sdpa": dict(times_s=[1.0, 2.0, 3.0], median_s=2.0, peak_bytes=30),
        "roberta-eager": dict(times_s=[2.0, 2.0, 6.0], median_s=2.0, peak_bytes=60),
        "roberta-sdpa": dict(times_s=[4.0, 4.0, 4.0], median_s=4.0, peak_bytes=40),
        "longformer": dict(status="out of memory"),  # no figures: no ratios
    }
    ratios = script.section_ratios(rows)
    assert set(ratios) == {"blockbert-n2-sdpa", "roberta-eager", "roberta-sdpa"}
    n2 = ratios["blockbert-n2-sdpa"]
    assert n2["roberta-eager"] == {"time_paired": 0.5, "time_of_medians": 1.0, "memory": 0.5}
    assert n2["roberta-sdpa"] == {"time_paired": 0.5, "time_of_medians": 0.5, "memory": 0.75}
    assert ratios["roberta-sdpa"]["roberta-sdpa"] == {"time_paired": 1.0, "time_of_medians": 1.0, "memory": 1.0}


def test_largest_batch_search_brackets_then_bisects():
    def fits(batch):
        return batch <= 37

    for guess in (1, 20, 37, 80, 100):  # from below, at, and above the answer
        found = search_largest_batch(fits, guess, limit=100, time_left=lambda: 1.0, tolerance=0)
        assert (found["largest_fitting"], found["smallest_failing"], found["status"]) == (37, 38, "ok")
        assert [batch for batch, fitted, _ in found["probes"] if fitted] == sorted(
            b for b, f, _ in found["probes"] if f
        )
    at_limit = search_largest_batch(fits, 8, limit=30, time_left=lambda: 1.0)
    assert (at_limit["largest_fitting"], at_limit["smallest_failing"], at_limit["status"]) == (30, None, "at limit")
    nothing = search_largest_batch(lambda batch: False, 8, limit=30, time_left=lambda: 1.0)
    assert (nothing["largest_fitting"], nothing["smallest_failing"], nothing["status"]) == (0, 1, "ok")
    no_time = search_largest_batch(fits, 8, limit=30, time_left=lambda: 0.0)
    assert (no_time["status"], no_time["probes"]) == ("cut", [])


def test_a_probe_that_runs_out_of_memory_does_not_fit_and_other_errors_propagate(monkeypatch):
    real_step = largest_batch.make_training_step

    def step_needing_memory(model, optimizer, input_ids, labels, autocast_dtype=None):
        if input_ids.shape[0] > 5:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        if input_ids.shape[0] == 4:
            raise RuntimeError("an illegal memory access was encountered")
        return real_step(model, optimizer, input_ids, labels, autocast_dtype)

    monkeypatch.setattr(largest_batch, "make_training_step", step_needing_memory)
    probe = TrainingStepProbe("blockbert-n2-sdpa", 32, ModelSize.tiny(), 0.1, "cpu", "bfloat16")
    assert probe(5) and not probe(6) and not probe(64)
    with pytest.raises(RuntimeError, match="illegal memory access"):
        probe(4)


def test_a_part_over_its_budget_is_cut_and_recorded(script, tmp_path):
    assert script.main(["--tiny", "--device", "cpu", "--output_dir", str(tmp_path), "--budgets",
                        "train=0,inference=0,max_batch=0"]) == 0  # fmt: skip
    results = json.loads((tmp_path / "gpu_efficiency.json").read_text())
    for name in ("train", "inference", "max_batch"):
        assert results["parts"][name]["status"] == "cut" and results["parts"][name]["budget_s"] == 0
    rows = [row for *_, row in _rows(results, "train")] + list(results["parts"]["max_batch"]["rows"].values())
    assert {row["status"] for row in rows} == {"cut", "not run"}  # not run: flex_attention, CUDA only
    assert all("budget was spent" in row["detail"] for row in rows if row["status"] == "cut")
    assert results["parts"]["long_document"]["status"] == "not run"  # no --long_document_data
    markdown = (tmp_path / "gpu_efficiency.md").read_text()
    assert "| train | cut | 0 |" in markdown and "| long_document | not run |" in markdown
    # the markdown again from the .json alone
    (tmp_path / "gpu_efficiency.md").unlink()
    assert script.main(["--render", str(tmp_path / "gpu_efficiency.json")]) == 0
    assert (tmp_path / "gpu_efficiency.md").read_text() == markdown


def test_a_budget_spent_mid_part_keeps_what_was_measured(script, tmp_path):
    """The budget runs out after the first measurement: that row is kept, every later one is cut, and the timing pass
    (which would need rounds the budget no longer has) is recorded as cut too."""
    calls = itertools.count()
    budget = script.Budget(1.0, clock=lambda: 0.0 if next(calls) < 2 else 100.0)
    results = {"parts": {"train": {}}}
    saved = []
    job = script.Job(script.TINY, "cpu", budget, lambda: saved.append(1), None, results)
    script.comparison_part(results["parts"]["train"], job, training=True)
    first, *others = _rows(results, "train")
    assert first[2]["status"] == "timing cut" and first[2]["peak_bytes"] > 0 and "median_s" not in first[2]
    assert {row["status"] for *_, row in others} == {"cut", "not run"} and budget.cut
    assert len(saved) >= len(others) + 1  # the results files are rewritten after every measurement


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--parts", "train,speed"], "unknown part(s) ['speed']"),
        (["--budgets", "train=fast"], "is not PART=SECONDS"),
        (["--budgets", "warmup=10"], "unknown part 'warmup'"),
        (["--budgets", "train=-1"], "at least 0 seconds"),
        (["--long_document_data", "somewhere"], "go together"),
    ],
)
def test_bad_arguments_are_refused_before_any_work(script, arguments, message, capsys):
    with pytest.raises(SystemExit):
        script.parse_args(["--device", "cpu", *arguments])
    assert message in capsys.readouterr().err


def test_a_long_document_folder_without_the_article_set_is_named(script, tmp_path, capsys):
    with pytest.raises(SystemExit):
        script.parse_args(["--long_document_data", str(tmp_path), "--long_document_source", str(tmp_path)])
    assert "has no article.json: build it with experiments/build_long_context_qa.py" in capsys.readouterr().err


def _paper_results(scale, n2_memory_to_eager):
    ratios = {"blockbert-n2-sdpa": {"roberta-eager": {"time_paired": 0.9, "memory": n2_memory_to_eager}}}
    section = dict(name="8 x 1024", nominal_seq_len=1024, rows={}, ratios=ratios)
    return {"settings": {"scale": scale}, "parts": {"train": {"sections": [section]}}}


def test_the_table_beside_the_paper_says_where_a_figure_is_above_the_paper_s(script):
    lower = script.paper_markdown(_paper_results("BERT-base", 0.70))
    assert "| training step, 8 x 1024 | BlockBERT n=2 (sdpa) | 0.900 |  | 0.700 |  | memory 0.73 (Table 3) |" in lower
    assert "memory lower (0.70)" in lower
    assert "memory HIGHER (0.81)" in script.paper_markdown(_paper_results("BERT-base", 0.81))
    assert "tiny sizes: not comparable" in script.paper_markdown(_paper_results("tiny", 0.81))


@pytest.mark.slow
def test_tiny_run_measures_every_part_and_takes_ratios_from_its_rows(script, tmp_path, long_document_inputs):
    # budgets for a shared CPU (the defaults are an H200's): every part runs to its end
    budgets = ",".join(f"{name}=900" for name in script.PARTS)
    arguments = ["--tiny", "--device", "cpu", "--output_dir", str(tmp_path), "--budgets", budgets]
    assert script.main([*arguments, *long_document_inputs]) == 0
    results = json.loads((tmp_path / "gpu_efficiency.json").read_text())
    assert results["versions"]["torch"] == torch.__version__ and results["versions"]["transformers"]
    assert {name: part["status"] for name, part in results["parts"].items()} == dict.fromkeys(script.PARTS, "done")
    assert all("torch" in part["machine"] and "elapsed_s" in part for part in results["parts"].values())
    for name, part in results["parts"].items():
        if name in ("train", "inference"):
            assert [s["nominal_seq_len"] for s in part["sections"]] == [512, 1024, 4096]
            assert list(part["sections"][0]["rows"]) == list(script.CORE_MODELS)
            assert list(part["sections"][1]["rows"]) == list(script.CORE_MODELS + script.LONG_MODELS)
    for part in ("train", "inference"):
        for section, key, row in _rows(results, part):
            if key == "blockbert-n2-flex_attention":
                assert row["status"] == "not run"
                continue
            assert row["status"] == "ok", row
            assert row["sequences_per_s"] == pytest.approx(section["batch_size"] / row["median_s"])
            for anchor in script.ANCHORS:
                theirs = section["rows"][anchor]
                ratio = section["ratios"][key][anchor]
                assert ratio["time_paired"] == pytest.approx(median_paired_ratio(row["times_s"], theirs["times_s"]))
                assert ratio["memory"] == pytest.approx(row["peak_bytes"] / theirs["peak_bytes"])
    bigbird = results["parts"]["train"]["sections"][2]["rows"]["bigbird"]
    assert bigbird["precision"].startswith("fp32") and bigbird["attention_used"] == "block_sparse"
    max_batch = results["parts"]["max_batch"]["rows"]
    assert max_batch["roberta-sdpa"]["largest_fitting"] == script.TINY.max_batch_limit  # no memory limit on the CPU
    assert max_batch["blockbert-n2-sdpa"]["ratios"]["roberta-eager"] == 1.0
    long_document = results["parts"]["long_document"]["result"]
    assert long_document["device"] == "cpu" and long_document["dtype"] == "bfloat16"
    assert long_document["sets"]["article"]["questions"] >= 1
    markdown = (tmp_path / "gpu_efficiency.md").read_text()
    assert "## BlockBERT beside the paper" in markdown and "memory 0.73 (Table 3)" in markdown
    assert "## Seconds per question over whole articles" in markdown and str(tmp_path) not in markdown


@pytest.mark.slow
def test_the_offline_gpu_step_leaves_its_results_in_out_when_its_time_is_up(tmp_path):
    """`benchmarks/offline_gpu/efficiency.sh run` as the GPU machine runs it (without its setup): the benchmark
    interrupted by `timeout` (SIGINT) still leaves its .json and .md in $OUT, with the part it was in marked."""
    arguments = ["--tiny", "--device", "cpu", "--parts", "train,max_batch", "--budgets", "train=600,max_batch=0"]
    # The time limit falls inside the train part on any machine: 70% of what the whole run takes here.
    started = time.monotonic()
    probe = [sys.executable, "benchmarks/gpu_efficiency.py", "--output_dir", str(tmp_path / "probe"), *arguments]
    subprocess.run(probe, cwd=REPO_ROOT, timeout=300, check=True, capture_output=True)
    time_limit = 0.7 * (time.monotonic() - started)
    environment = dict(
        os.environ,
        OUT=str(tmp_path / "out"),
        PACKED=str(tmp_path / "nothing_packed"),
        SKIP_SETUP="1",
        PYTHON=sys.executable,
        EFFICIENCY_SECONDS=f"{time_limit:.1f}",
        EFFICIENCY_ARGS=" ".join(arguments),
    )
    script = REPO_ROOT / "benchmarks" / "offline_gpu" / "efficiency.sh"
    subprocess.run(["bash", str(script), "run"], cwd=REPO_ROOT, env=environment, timeout=300, check=True)
    results_dir = tmp_path / "out" / "gpu_efficiency"
    log = (results_dir / "run.log").read_text()
    assert "the long_document part will not run" in log and "exited with status 124 (124: stopped" in log
    results = json.loads((results_dir / "gpu_efficiency.json").read_text())
    assert (
        results["parts"]["train"]["status"] == "interrupted"
        and results["parts"]["max_batch"]["status"] == "not started"
    )
    assert any(row["status"] == "ok" for _, _, row in _rows(results, "train"))  # what it measured before the signal
    assert "| train | interrupted |" in (results_dir / "gpu_efficiency.md").read_text()
