"""Which model `make demo` starts from (experiments/demo_starts.py): the rule fixed before the runs, applied to the
demo runs' results, and bad run folders refused before anything is written."""

import json

import pytest
from conftest import load_script


script = load_script("experiments/demo_starts.py")


def _demo_run(folder, seed, whole_f1, source=None, machine="2-core CPU", epochs=2.0):
    folder.mkdir(parents=True)
    results = {
        "kind": "blockbert-hf demo",
        "command": f"python experiments/demo.py --seed {seed}",
        "machine": machine,
        "arguments": {"seed": seed, "source_model": source, "output_dir": str(folder), "num_train_epochs": epochs},
        "held_out": {"whole_document": {"f1": whole_f1, "questions": 7}, "own_paragraph": {"f1": 60.0 + seed}},
        "elapsed_seconds": 600.0,
    }
    (folder / "results.json").write_text(json.dumps(results))
    return folder


def _summary(*whole_f1):
    held_out = {"own_paragraph": {"f1": 60.0}}
    return script.start_summary([{"arguments": {"seed": seed, "source_model": None}, "command": "demo",
                                  "held_out": {**held_out, "whole_document": {"f1": f1, "questions": 7}},
                                  "elapsed_seconds": 600.0} for seed, f1 in enumerate(whole_f1)])  # fmt: skip


@pytest.mark.parametrize(
    "converted, distilled, build_seconds, starts_from_distilled",
    [
        ((40.0, 42.0), (45.0, 46.0), 60.0, True),  # +4.5 against a spread of 2
        ((40.0, 42.0), (42.0, 44.0), 60.0, False),  # +2.0: not more than the spread
        ((40.0, 42.0), (39.0, 40.0), 60.0, False),  # lower
        ((40.0, 42.0), (45.0, 46.0), 121.0, False),  # too slow to build
    ],
)
def test_the_distilled_start_is_taken_only_above_the_seed_spread_and_within_the_time(
    converted, distilled, build_seconds, starts_from_distilled
):
    decision = script.decide(_summary(*converted), _summary(*distilled), build_seconds)
    assert decision["start_from_distilled"] is starts_from_distilled


def test_the_report_applies_the_rule_to_the_runs_and_names_it(tmp_path, monkeypatch):
    monkeypatch.setattr(script, "time_build", lambda source_model: 30.0)
    converted = [_demo_run(tmp_path / f"converted_seed{seed}", seed, f1) for seed, f1 in ((0, 40.0), (1, 41.0))]
    distilled = [_demo_run(tmp_path / f"distilled_seed{seed}", seed, f1, "ckpt") for seed, f1 in ((0, 44.0), (1, 45.0))]
    out = tmp_path / "starts"
    argv = ["--converted", *map(str, converted), "--distilled", *map(str, distilled), "--output_dir", str(out)]
    assert script.main(argv) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["distilled"]["mean_whole_article_f1"] == 44.5 and results["converted"]["seed_spread"] == 1.0
    assert results["decision"]["gain"] == 4.0 and results["decision"]["start_from_distilled"]
    report = (out / "README.md").read_text()
    assert script.RULE in report and "starts from the self-distilled checkpoint" in report
    assert "the 7 questions of one article" in report


@pytest.mark.parametrize("bad", ["missing", "other_epochs", "other_machine"])
def test_runs_that_cannot_be_compared_are_refused_before_writing(tmp_path, capsys, bad):
    converted = _demo_run(tmp_path / "converted_seed0", 0, 40.0)
    distilled = tmp_path / "distilled_seed0"
    if bad == "other_epochs":
        _demo_run(distilled, 0, 44.0, "ckpt", epochs=3.0)
    elif bad == "other_machine":
        _demo_run(distilled, 0, 44.0, "ckpt", machine="another CPU")
    out = tmp_path / "starts"
    assert script.main(["--converted", str(converted), "--distilled", str(distilled), "--output_dir", str(out)]) == 2
    assert "demo_starts.py: error:" in capsys.readouterr().err and not out.exists()
