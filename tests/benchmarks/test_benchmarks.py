"""The efficiency benchmarks: memory measurement, isolation, fits and tables (the `blockbert_benchmarks` harness), and
the --quick mode of every script in benchmarks/ (which checks that the scripts work; nothing here asserts speed)."""

import json
import os
import re
import subprocess
import sys

import pytest
import torch
from conftest import REPO_ROOT, load_script

from blockbert_benchmarks.arguments import parse_grid
from blockbert_benchmarks.isolation import run_isolated, run_measurement
from blockbert_benchmarks.measurements import measure_forward, measure_training_step
from blockbert_benchmarks.measuring.memory import GIB, fit_line, track_peak_memory
from blockbert_benchmarks.measuring.timing import interleaved_medians, ratios_to
from blockbert_benchmarks.models import (
    CANDIDATES,
    Candidate,
    ModelSize,
    build_benchmark_model,
    parse_candidates,
    share_parameters,
)
from blockbert_benchmarks.reporting import targets_table
from blockbert_hf.saving import write_file_atomically


BENCHMARKS = REPO_ROOT / "benchmarks"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
MIB = 2**20


def run_quick(name, output_dir):
    completed = subprocess.run(
        [sys.executable, str(BENCHMARKS / f"{name}.py"), "--quick", "--output_dir", str(output_dir)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO_ROOT,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    for suffix in ("json", "md", "png"):
        assert (output_dir / f"{name}.{suffix}").stat().st_size > 0
    assert (output_dir / f"{name}.png").read_bytes()[:8] == PNG_SIGNATURE
    assert not [p for p in output_dir.iterdir() if p.name.startswith(".")], "a temporary file was left behind"
    results, markdown = json.loads((output_dir / f"{name}.json").read_text()), (output_dir / f"{name}.md").read_text()
    # an output folder outside the repository and the folder the command ran in is recorded by its name
    assert results["args"]["output_dir"] == output_dir.name and str(output_dir) not in markdown
    assert f"`python benchmarks/{name}.py --quick --output_dir {output_dir.name}`" in markdown
    return results, markdown


# --- memory measurement -------------------------------------------------------------------------------------------


def test_track_peak_memory_counts_the_peak_of_tensors_allocated_inside():
    existing = torch.ones(1024, 1024)  # 4 MiB allocated before: neither it nor its free is counted
    with track_peak_memory("cpu") as memory:
        first = torch.ones(1024, 1024)  # 4 MiB
        second = torch.ones(2 * 1024, 1024)  # 8 MiB: 12 MiB held
        del first
        third = torch.ones(1024, 1024)  # 8 + 4 = 12 MiB again, never more
        del existing, second
    assert memory.peak_bytes == 12 * MIB
    assert memory.retained_bytes == 4 * MIB  # `third`
    assert "profiler" in memory.method
    with track_peak_memory("cpu") as again:
        del third  # allocated during the previous measurement: its free must not lower this one's count
        fourth = torch.ones(1024, 1024)
    assert (again.peak_bytes, again.retained_bytes) == (4 * MIB, 4 * MIB)
    del fourth
    with pytest.raises(ValueError, match="'cpu' or 'cuda'"):
        with track_peak_memory("meta"):
            pass


def test_measuring_cpu_memory_prints_nothing_of_the_profiler():
    """torch's profiler back end prints its start and stop ("USDT: ... profiler_start") on stderr, which a user of the
    demo reads as errors."""
    script = (
        "import torch\n"
        "from blockbert_benchmarks.measuring.memory import track_peak_memory\n"
        "with track_peak_memory('cpu') as memory:\n"
        "    torch.ones(1024).sum()\n"
        "print(memory.peak_bytes)\n"
    )
    environment = {name: value for name, value in os.environ.items() if name != "KINETO_LOG_LEVEL"}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO_ROOT / "benchmarks", env=environment
    )
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) > 0
    assert "profiler_start" not in done.stderr and "USDT" not in done.stderr + done.stdout


def test_training_step_memory_is_decomposed_as_in_the_paper():
    result = measure_training_step("blockbert-n2-sdpa", batch_size=2, seq_len=64, size=ModelSize.tiny())
    model = build_benchmark_model(CANDIDATES["blockbert-n2-sdpa"], 64, ModelSize.tiny(), masked_lm=True)
    parameters = sum(p.numel() * 4 for p in model.parameters())
    assert result["model_bytes"] == parameters
    # AdamW keeps two fp32 moments per parameter (plus one scalar step per tensor).
    assert 2 * parameters <= result["optimizer_bytes"] < 2 * parameters + 4096
    # The step's own peak holds at least the gradients.
    assert result["activation_bytes"] >= result["gradient_bytes"] == parameters
    assert result["peak_bytes"] == result["model_bytes"] + result["optimizer_bytes"] + result["activation_bytes"]


def test_blockwise_attention_halves_the_quadratic_memory_of_a_forward():
    """Attention memory scales as N^2 / n: the growth of the forward's peak from N to 2N is smaller."""
    size = ModelSize(num_layers=1, hidden_size=32, num_heads=4, intermediate_size=32, vocab_size=128)

    def growth(key):
        small, large = (measure_forward(key, 2, n, size)["peak_bytes"] for n in (256, 512))
        return large - small

    assert growth("blockbert-n2-eager") < 0.75 * growth("blockbert-full-eager")


# --- models of the comparison ----------------------------------------------------------------------------------------


def test_shared_parameters_make_blockbert_full_compute_roberta():
    size = ModelSize.tiny()
    roberta = build_benchmark_model(CANDIDATES["roberta-eager"], 64, size, hidden_dropout=0.0).eval()
    blockbert = build_benchmark_model(CANDIDATES["blockbert-full-sdpa"], 64, size, hidden_dropout=0.0).eval()
    share_parameters(roberta, blockbert)
    shared = blockbert.encoder.layer[0].attention.self.query.weight
    assert shared is roberta.encoder.layer[0].attention.self.query.weight
    input_ids = torch.randint(5, size.vocab_size, (2, 64))
    with torch.no_grad():
        expected = roberta(input_ids=input_ids).last_hidden_state
        torch.testing.assert_close(blockbert(input_ids=input_ids).last_hidden_state, expected, atol=1e-5, rtol=1e-5)


def test_share_parameters_refuses_models_of_other_shapes():
    size = ModelSize.tiny()
    donor = build_benchmark_model(CANDIDATES["roberta-eager"], 64, size)
    longer = build_benchmark_model(CANDIDATES["blockbert-n2-eager"], 128, size)  # more position embeddings
    with pytest.raises(ValueError, match="position_embeddings"):
        share_parameters(donor, longer)


def test_masked_only_mlm_logits_candidate_gives_roberta_s_loss_with_shared_weights():
    size = ModelSize.tiny()
    roberta = build_benchmark_model(CANDIDATES["roberta-sdpa"], 64, size, masked_lm=True, hidden_dropout=0.0).eval()
    sparse = build_benchmark_model(
        CANDIDATES["blockbert-full-sdpa-sparse"], 64, size, masked_lm=True, hidden_dropout=0.0
    ).eval()
    assert sparse.config.sparse_prediction
    share_parameters(roberta, sparse)
    input_ids = torch.randint(5, size.vocab_size, (2, 64))
    labels = torch.full_like(input_ids, -100)
    labels[:, ::7] = input_ids[:, ::7]
    with torch.no_grad():
        outputs = sparse(input_ids=input_ids, labels=labels)
        expected = roberta(input_ids=input_ids, labels=labels).loss
    assert outputs.logits.shape == (int((labels != -100).sum()), size.vocab_size)
    torch.testing.assert_close(outputs.loss, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "candidate, message",
    [
        (Candidate("roberta", "sdpa", sparse_prediction=True), "BlockBERT option"),  # masked-only MLM logits
        (Candidate("longformer", "sdpa"), "only an eager"),
        (Candidate("bigbird", "sdpa"), "only an eager"),
    ],
)
def test_candidates_the_models_cannot_be_are_refused(candidate, message):
    with pytest.raises(ValueError, match=message):
        build_benchmark_model(candidate, 128, ModelSize.tiny())


def test_bigbird_reports_when_it_fell_back_to_full_attention():
    size = ModelSize.tiny()  # block sparse needs more than (5 + 2 * 1) * 16 = 112 tokens
    assert measure_forward("bigbird", 1, 128, size)["attention_used"] == "block_sparse"
    assert measure_forward("bigbird", 1, 96, size)["attention_used"] == "original_full"
    assert measure_forward("roberta-eager", 1, 96, size)["attention_used"] is None


# --- isolation -------------------------------------------------------------------------------------------------------


def test_run_isolated_returns_the_measurement_of_a_fresh_process():
    kwargs = dict(candidate_key="blockbert-n2-eager", batch_size=1, seq_len=64, size=ModelSize.tiny())
    result = run_isolated(measure_forward, kwargs, memory_budget_bytes=4 * GIB, timeout_s=120, threads=1)
    assert result["status"] == "ok", result
    assert result["peak_bytes"] == measure_forward(**kwargs)["peak_bytes"]


def test_run_isolated_reports_a_measurement_past_the_memory_budget_as_out_of_memory():
    # One layer's attention scores alone: 4096 x 4 heads x 128 x 128 fp32 = 1 GiB, against a 256 MiB budget.
    size = ModelSize(num_layers=1, hidden_size=32, num_heads=4, intermediate_size=32, vocab_size=128)
    kwargs = dict(candidate_key="roberta-eager", batch_size=4096, seq_len=128, size=size)
    result = run_isolated(measure_forward, kwargs, memory_budget_bytes=256 * MIB, timeout_s=120, threads=1)
    assert result["status"] == "out of memory", result
    assert "allocate" in result["detail"]


def test_run_isolated_reports_a_measurement_past_the_timeout_as_too_slow():
    kwargs = dict(candidate_key="roberta-eager", batch_size=1, seq_len=64, size=ModelSize.tiny())
    result = run_isolated(measure_forward, kwargs, timeout_s=0.5, threads=1)
    assert result == {"status": "too slow", "detail": "no result within 0.5 s"}


def test_run_measurement_in_process_lets_real_errors_through():
    with pytest.raises(KeyError):
        run_measurement(measure_forward, dict(candidate_key="no-such-model", batch_size=1, seq_len=8), isolated=False)


# --- fits, ratios, parsing, files ------------------------------------------------------------------------------------


def test_fit_line_recovers_a_line_and_needs_two_distinct_points():
    slope, intercept = fit_line([128, 256, 512], [3 * 128 + 7, 3 * 256 + 7, 3 * 512 + 7])
    assert slope == pytest.approx(3) and intercept == pytest.approx(7)
    with pytest.raises(ValueError, match="two points"):
        fit_line([512, 512], [1.0, 2.0])


def test_ratios_to_an_anchor_are_paired_by_round():
    results = {
        "anchor": {"median_s": 2.0, "times_s": [1.0, 2.0, 4.0]},
        "other": {"median_s": 1.0, "times_s": [0.5, 1.0, 2.0]},
    }
    ratios = ratios_to(results, "anchor")
    assert ratios["other"] == {"ratio_of_medians": 0.5, "median_paired_ratio": 0.5}
    assert ratios["anchor"]["median_paired_ratio"] == 1.0
    timed = interleaved_medians({"a": lambda: None, "b": lambda: None}, repeats=3, warmup=0)
    assert set(ratios_to(timed, "a")) == {"a", "b"}


def test_parse_grid_and_candidates_explain_bad_input():
    assert parse_grid("8x1024, 2x4096") == [(8, 1024), (2, 4096)]
    with pytest.raises(ValueError, match="BATCHxLENGTH"):
        parse_grid("8-1024")
    with pytest.raises(ValueError, match="BATCHxLENGTH"):
        parse_grid("0x1024")
    keys = [c.key for c in parse_candidates("roberta-sdpa,blockbert-n3-eager")]
    assert keys == ["roberta-sdpa", "blockbert-n3-eager"]
    with pytest.raises(ValueError, match="choose among .*blockbert-n2-sdpa"):
        parse_candidates("blockbert-n5-sdpa")


def test_targets_table_says_met_missed_or_not_measured():
    section = {
        "batch_size": 4,
        "seq_len": 1024,
        "rows": {
            "blockbert-n2-sdpa": {"peak_bytes": 70, "times_s": [9.0, 9.9, 7.2]},
            "roberta-eager": {"peak_bytes": 100},
            "roberta-sdpa": {"peak_bytes": 60, "times_s": [10.0, 11.0, 7.0]},
            "blockbert-n2-sdpa-sparse": {"times_s": [6.0, 7.0, 9.0]},
            "blockbert-full-sdpa-sparse": {"times_s": [10.0, 10.0, 10.0]},
        },
    }

    def target(what, model, anchor, kind, seq_len=1024, at_most=0.85, **extra):
        section = dict(seq_len=seq_len)
        return dict(what=what, section=section, model=model, anchor=anchor, at_most=at_most, kind=kind, **extra)

    targets = [
        target("memory", "blockbert-n2-sdpa", "roberta-eager", "memory", at_most=0.73, memory_field="peak_bytes"),
        target("time", "blockbert-n2-sdpa", "roberta-sdpa", "time"),
        target("elsewhere", "blockbert-n2-sdpa", "roberta-sdpa", "time", seq_len=4096, at_most=0.8),
        target("other anchor", "blockbert-n2-sdpa-sparse", "blockbert-full-sdpa-sparse", "time"),
    ]
    lines = targets_table(targets, [section]).splitlines()[2:]
    assert lines[0].endswith("| 0.700 | yes |")
    assert lines[1].endswith("| 0.900 | NO |")
    assert lines[2].endswith("|  | not measured |")
    assert lines[3].endswith("| 0.700 | yes |")  # median of the paired rounds 0.6, 0.7, 0.9


def test_write_file_atomically_replaces_or_leaves_the_old_file(tmp_path):
    target = tmp_path / "results.md"
    write_file_atomically(target, "old")

    def fail(path):
        open(path, "w").write("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        write_file_atomically(target, fail)
    assert target.read_text() == "old"
    assert list(tmp_path.iterdir()) == [target]
    write_file_atomically(target, b"new")
    assert target.read_text() == "new"


@pytest.mark.parametrize(
    "script, arguments, message",
    [
        ("memory_regression", ["--seq_lens", "100,128"], "must divide --tokens_per_step"),
        ("memory_regression", ["--seq_lens", "512"], "at least two different N"),
        ("memory_regression", ["--models", "gpt2"], "choose among"),
        ("inference", ["--grid", "8by1024"], "BATCHxLENGTH"),
        ("inference", ["--longformer_window", "511"], "even"),
        ("train_step", ["--attention_dropouts", "1.5"], r"\[0, 1\)"),
        ("train_step", ["--repeats", "0"], "at least 1"),
        ("profile_step", ["--shape", "4x1024,8x512"], "one BATCHxLENGTH"),
        ("profile_step", ["--models", "gpt2"], "choose among"),
    ],
)
def test_scripts_reject_bad_arguments_with_a_reason(script, arguments, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        load_script(f"benchmarks/{script}.py").parse_args(arguments)
    assert exit_info.value.code == 2
    assert re.search(message, capsys.readouterr().err)


# --- the scripts' quick modes (they check that the scripts run and write their outputs; no speed is asserted) -------


def test_memory_regression_fit_without_a_quadratic_term_in_the_reference():
    script = load_script("benchmarks/memory_regression.py")
    candidates = parse_candidates("blockbert-full-sdpa,blockbert-n2-sdpa")
    flat = [dict(model="blockbert-full-sdpa", seq_len=n, status="ok", activation_bytes=4 * GIB) for n in (256, 512)]
    rising = [
        dict(model="blockbert-n2-sdpa", seq_len=n, status="ok", activation_bytes=4 * GIB + n * MIB) for n in (256, 512)
    ]
    fits = script.fit_all(flat + rising, candidates)
    assert fits["blockbert-n2-sdpa"]["reference"] == "blockbert-full-sdpa"
    assert "slope_ratio" not in fits["blockbert-n2-sdpa"]
    assert fits["blockbert-n2-sdpa"]["slope_bytes_per_token"] == pytest.approx(MIB)


def test_memory_regression_quick_mode(tmp_path):
    results, markdown = run_quick("memory_regression", tmp_path)
    assert {p["status"] for p in results["points"]} == {"ok"}
    fits = results["fits"]
    assert set(fits) == {f"blockbert-{n}-{kernel}" for n in ("full", "n2", "n3") for kernel in ("eager", "sdpa")}
    # Memory is deterministic: the blockwise O(N^2) slope is the full one divided by n (paper Table 2).
    for kernel in ("eager", "sdpa"):
        assert fits[f"blockbert-n2-{kernel}"]["slope_ratio"] == pytest.approx(1 / 2, abs=0.05)
        assert fits[f"blockbert-n3-{kernel}"]["slope_ratio"] == pytest.approx(1 / 3, abs=0.05)
    assert "## Least-squares fit" in markdown and "O(N^2) part at N=1024" in markdown


def test_inference_quick_mode(tmp_path):
    results, markdown = run_quick("inference", tmp_path)
    (section,) = results["sections"]
    # Every model except the masked-only-MLM-logits variants, which differ from their base models only in training.
    assert set(section["rows"]) == {
        key for key, c in CANDIDATES.items() if not c.sparse_prediction and c.attn_implementation != "flex_attention"
    }
    for key, row in section["rows"].items():
        assert row["status"] == "ok", (key, row)
        assert len(row["times_s"]) == 2 and row["peak_bytes"] > 0
        assert set(row["ratios"]) == {"roberta-eager", "roberta-sdpa"}
    assert section["rows"]["bigbird"]["attention_used"] == "block_sparse"
    assert "| BlockBERT n=4 (sdpa) |" in markdown


def test_train_step_quick_mode(tmp_path):
    results, markdown = run_quick("train_step", tmp_path)
    assert [s["attention_dropout"] for s in results["sections"]] == [0.1, 0.0]
    for section in results["sections"]:
        for key, row in section["rows"].items():
            assert row["status"] == "ok", (key, row)
            assert row["peak_bytes"] > row["model_bytes"] + row["optimizer_bytes"]
            assert row["median_s"] > 0
    assert "attention dropout 0.1" in markdown and "| Longformer (eager) |" in markdown


@pytest.mark.parametrize("forward", [False, True])
def test_profile_step_quick_mode(tmp_path, forward):
    script = load_script("benchmarks/profile_step.py")
    assert script.main(["--quick", "--output_dir", str(tmp_path), *(["--forward"] if forward else [])]) == 0
    stem = "profile_forward" if forward else "profile_train_step"
    results = json.loads((tmp_path / f"{stem}.json").read_text())["results"]
    assert list(results) == (script.DEFAULT_FORWARD_MODELS if forward else script.DEFAULT_MODELS).split(",")
    for key, result in results.items():
        assert result["status"] == "ok", (key, result)
        # The groups partition the ops: together they are the whole profiled time.
        assert sum(result["groups"].values()) == pytest.approx(result["profiled_s"])
        assert result["groups"]["dense layers and MLM head (mm, addmm)"] > 0
        # Only a training step computes the MLM loss.
        assert ("aten::_log_softmax" in result["ops"]) is not forward
    markdown = (tmp_path / f"{stem}.md").read_text()
    assert "| attention softmax and its gradient |" in markdown
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "a temporary file was left behind"
