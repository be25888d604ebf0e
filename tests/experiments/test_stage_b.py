"""The distillation comparison's Stage B (`qa_comparison.py --grid distilled_long`): its cells as the rule's third and
sixth amendments fix them, the copy of the encoder distilled at N = 512 that they start from, the convergence check
before any test set, and the report's verdict."""

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from blockbert_experiments.qa_comparison import runner
from blockbert_experiments.qa_comparison.grid import (
    DISTILLED_ENCODER_N512,
    DISTILLED_LONG_GRID,
    ComparisonConfig,
    batch_sizes,
)
from blockbert_experiments.qa_comparison.layout import MEASUREMENTS_FILE, CellLayout
from blockbert_experiments.qa_comparison.runner import _convert, write_grid_report
from blockbert_experiments.qa_comparison.stage_b_report import failed_baseline_checks, stage_b_verdict
from blockbert_experiments.qa_comparison.steps import train_args
from blockbert_hf.model.configuration_blockbert import BlockBertConfig


CELLS = {cell.name: cell for cell in DISTILLED_LONG_GRID}
MANIFEST = {"sets": {"train_article": {"file": "train_article.json", "half": "first", "questions": 5366,
                                       "target_tokens": None}}}  # fmt: skip
DEV_AND_TEST_SETS = ("dev_window_512", "dev_article", "article")
# The option of the Stage B command in results/distillation/README.md that shapes a cell's batches (the run's
# effective batch left at its default: the cells set their own).
STAGE_B_OPTIONS = dict(train_tokens_per_batch=8192)


def _options(args: list[str]) -> dict[str, str]:
    return {word: value for word, value in zip(args, [*args[1:], ""]) if word.startswith("--")}


def test_stage_b_trains_every_arm_one_epoch_of_every_whole_article_question_at_batch_16_without_a_teacher():
    assert len(CELLS) == 7
    config = ComparisonConfig(**STAGE_B_OPTIONS)
    for cell in CELLS.values():
        assert (cell.training_set, cell.learning_rate, cell.negative_window_rate) == ("train_article", 2e-4, 0.08)
        assert cell.eval_sets == ("dev_window_512", "dev_article", "article") and cell.teacher is None
        options = _options(train_args(config, cell, MANIFEST, 60.0))
        assert (options["--num_train_epochs"], options["--learning_rate"]) == ("1.0", "0.0002")
        assert "--max_train_samples" not in options and "--max_train_steps" not in options
        assert "--group_by_length" not in options and "--teacher_model_name_or_path" not in options
        per_device, accumulation = batch_sizes(config, cell)
        assert per_device * accumulation == 16 and per_device * cell.max_seq_length == 8192
    sliding = CELLS["n512_full_article_seed1"]
    assert (sliding.attention_pattern, sliding.max_seq_length, sliding.distilled_from) == ("full", 512, None)
    assert sliding.convergence_check == (("dev_window_512", 45.0), ("dev_article", 43.0))
    assert sliding.record()["convergence_check"] == sliding.convergence_check


def test_stage_b_blockbert_cells_differ_only_in_the_heads_that_read_the_other_block():
    ten_two, twelve_zero = CELLS["n1024_n2_10-2_distilled_seed0"], CELLS["n1024_n2_12-0_distilled_seed0"]
    assert replace(twelve_zero, name=ten_two.name, heads_per_shift="10:2") == ten_two
    assert (ten_two.window_layout, ten_two.block_relative_positions, ten_two.qa_objective) == (
        "question_prefixed_blocks", True, "window"
    )  # fmt: skip
    assert (ten_two.distilled_from, ten_two.convergence_check) == (DISTILLED_ENCODER_N512, None)
    train = " ".join(train_args(ComparisonConfig(**STAGE_B_OPTIONS), ten_two, MANIFEST, 60.0))
    assert "--qa_objective" not in train and "--window_layout question_prefixed_blocks" in train
    assert "--per_device_train_batch_size 8 --gradient_accumulation_steps 2" in train


def test_stage_b_copies_the_encoder_distilled_at_512_into_two_blocks_of_512_with_positions_restarting(tmp_path):
    encoder = tmp_path / DISTILLED_ENCODER_N512
    BlockBertConfig(
        hidden_size=48, num_attention_heads=12, num_hidden_layers=1, intermediate_size=96, vocab_size=100,
        max_position_embeddings=514, pad_token_id=1, num_blocks=2, heads_per_shift="10:2",
    ).save_pretrained(encoder)  # fmt: skip
    (encoder / "model.safetensors").write_bytes(b"weights")  # copied, not read
    config = ComparisonConfig(grid="distilled_long", distilled_dir=str(tmp_path), work_dir=str(tmp_path / "work"))
    for name, heads in (("n1024_n2_10-2_distilled_seed0", [10, 2]), ("n1024_n2_12-0_distilled_seed0", [12, 0])):
        _convert(config, CELLS[name], tmp_path / "unused-source")
        copied = BlockBertConfig.from_pretrained(tmp_path / "work" / "models" / CELLS[name].model_name)
        assert (copied.effective_block_size, copied.max_sequence_length, copied.block_relative_positions) == (
            512, 1024, True
        )  # fmt: skip
        assert list(copied.heads_per_shift) == heads


def _write_cell(folder: Path, name: str, f1: list[float], check: dict | None = None) -> None:
    """A finished cell whose per-question F1 (0..1) over whole articles is `f1`."""
    results = {
        "cell": {"name": name},
        "train": {"finished": True, "seconds": 3600.0, "loss_curve": [{"step": 50, "loss": 1.5}], "machines": ["cpu"]},
        "sets": {"article": {"exact_match": 0.0, "f1": 100 * float(np.mean(f1))}},
        "commands": [f"python examples/run_qa.py --output_dir {name}"],
        **({} if check is None else {"convergence_check": check}),
    }
    (folder / name).mkdir(parents=True)
    (folder / name / "results.json").write_text(json.dumps(results))
    (folder / name / "scores.json").write_text(json.dumps({"article": {"em": [0] * len(f1), "f1": f1}}))


def test_the_stage_b_report_gives_the_verdict_over_whole_articles_with_the_seed_spreads(tmp_path):
    folder = tmp_path / "results"
    folder.mkdir()
    articles = [0, 0, 1, 1, 2, 2, 3, 3]
    (folder / "questions.json").write_text(json.dumps({"article": {"article": articles, "ids": []}}))
    config = ComparisonConfig(grid="distilled_long", results_dir=str(folder), bootstrap_samples=200)
    assert write_grid_report(config)["verdict"] is None
    for seed, f1 in enumerate((0.50, 0.51, 0.52)):  # sliding windows: 51 F1, seeds 2 F1 apart
        check = {
            "sets": [
                {"set": "dev_window_512", "min_f1": 45.0, "f1": 55.0 + seed, "passed": True},
                {"set": "dev_article", "min_f1": 43.0, "f1": 44.0, "passed": True},
            ],
            "passed": True,
        }
        _write_cell(folder, f"n512_full_article_seed{seed}", [f1] * 8, check)
    for seed, f1 in enumerate((0.60, 0.61, 0.62)):  # 10:2: 61 F1
        _write_cell(folder, f"n1024_n2_10-2_distilled_seed{seed}", [f1] * 8)
    summary = write_grid_report(config)
    assert summary["differences"]["D"]["article"]["difference"] == pytest.approx(10.0)
    assert summary["verdict"] == {
        "verdict": "BlockBERT at or above sliding windows", "D": pytest.approx(10.0),
        "D_interval": [pytest.approx(10.0), pytest.approx(10.0)], "D_prime_measured": False,
    }  # fmt: skip
    readme = (folder / "README.md").read_text()
    assert (
        "`D'` waits for 12:0" in readme
        and "| passed (55.0, 44.0), passed (56.0, 44.0), passed (57.0, 44.0) |" in readme
    )
    _write_cell(folder, "n1024_n2_12-0_distilled_seed0", [0.5] * 8)  # one seed: the largest spread here (2 F1)
    summary = write_grid_report(config)
    assert summary["differences"]["D'"]["article"]["spread_used"] == [pytest.approx(2.0), pytest.approx(2.0)]
    assert summary["verdict"]["verdict"] == "BlockBERT helps"
    readme = (folder / "README.md").read_text()
    assert "**BlockBERT helps**" in readme and "| D' = 10:2 - 12:0 | article | +11.0 |" in readme


@pytest.mark.parametrize(
    ("dev_f1", "failed"),
    [
        ({"dev_window_512": 45.0, "dev_article": 43.0}, None),
        ({"dev_window_512": 44.9, "dev_article": 60.0}, "F1 44.9 on dev_window_512, below its 45"),
        ({"dev_window_512": 60.0, "dev_article": 42.9}, "F1 42.9 on dev_article, below its 43"),
    ],
)
def test_a_cell_below_its_convergence_check_is_not_scored_on_any_test_set(tmp_path, monkeypatch, dev_f1, failed):
    config = ComparisonConfig(grid="distilled_long", work_dir=str(tmp_path))
    cell = CELLS["n512_full_article_seed0"]
    manifest = {"sets": {name: {"half": "dev" if name.startswith("dev_") else "second"} for name in DEV_AND_TEST_SETS}}
    done = []

    def evaluate(config, cell, manifest, test_set, names):  # what an evaluation leaves: its metrics, then its marker
        folder = CellLayout(config, cell).eval(test_set)
        folder.mkdir(parents=True)
        (folder / "eval_metrics.json").write_text(json.dumps({"f1": dev_f1.get(test_set, 1.0)}))
        (folder / MEASUREMENTS_FILE).write_text("{}")
        done.append(test_set)

    for step in ("_convert", "_train", "_write_students_logits", "write_cell_results"):
        monkeypatch.setattr(runner, step, lambda *args, **kwargs: None)
    monkeypatch.setattr(runner, "_evaluate", evaluate)
    if failed:
        with pytest.raises(runner.ConvergenceCheckFailed, match=failed):
            runner.run_cell(config, cell, manifest, DEV_AND_TEST_SETS, tmp_path)
        assert done == ["dev_window_512", "dev_article"]
    else:
        runner.run_cell(config, cell, manifest, DEV_AND_TEST_SETS, tmp_path)
        assert done == list(DEV_AND_TEST_SETS)
    record = runner.convergence_record(config, cell)
    assert [(check["set"], check["f1"]) for check in record["sets"]] == list(dev_f1.items())
    assert record["passed"] is (failed is None)


def _difference(value: float, low: float, high: float, status: str = "resolved") -> dict:
    return {"difference": value, "low": low, "high": high, "status": status}


@pytest.mark.parametrize(
    ("d", "d_prime", "verdict"),
    [
        (_difference(2.0, 0.5, 3.5), _difference(1.0, 0.2, 1.8, "unresolved: within the seed spread"),
         "BlockBERT at or above sliding windows"),
        (_difference(-0.2, -0.9, 0.5, "unresolved: the interval includes zero"), None,
         "BlockBERT at or above sliding windows"),
        (_difference(-4.0, -6.0, -2.0), _difference(3.0, 1.0, 5.0), "below sliding windows"),
        (_difference(-1.5, -3.0, -0.1, "unresolved: within the seed spread"), None, "inconclusive"),
        (_difference(-0.5, -2.0, 1.0, "unresolved: the interval includes zero"), None, "inconclusive"),
    ],
)  # fmt: skip
def test_the_stage_b_verdict_follows_the_rule(d, d_prime, verdict):
    differences = {"D": d} if d_prime is None else {"D": d, "D'": d_prime}
    assert stage_b_verdict(differences)["verdict"] == verdict


def _checked_cell(name: str, seed: int, passed: bool | None) -> dict:
    sets = [{"set": "dev_window_512", "min_f1": 45.0, "f1": 50.0 if passed else 43.3, "passed": passed}]
    return {"cell": {"name": f"{name}_seed{seed}"}, "convergence_check": {"sets": sets, "passed": passed}}


def test_a_sliding_windows_cell_that_failed_its_check_ends_stage_b_and_a_blockbert_one_does_not():
    arms = {
        "sliding": {0: _checked_cell("n512_full_article", 0, True), 1: _checked_cell("n512_full_article", 1, False)},
        "10:2": {0: _checked_cell("n1024_n2_10-2_distilled", 0, False)},
    }
    assert [failed["cell"] for failed in failed_baseline_checks(arms)] == ["n512_full_article_seed1"]
    arms["sliding"][1] = _checked_cell("n512_full_article", 1, None)  # not checked yet
    assert failed_baseline_checks(arms) == []
