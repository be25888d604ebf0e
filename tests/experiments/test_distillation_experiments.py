"""The distillation experiments: the comparison's plan (`experiments/distillation_plan.py`: cells sized from the
committed cells' steps and windows and the measured speeds, packed into sessions that never exceed the session
length) and the recipe's selection rule (`experiments/distillation_results.py`)."""

import json

import pytest
from conftest import load_script


plan = load_script("experiments/distillation_plan.py")
results = load_script("experiments/distillation_results.py")
SPEEDS = {key: {"train_step": 5.0, "inference_batch": 2.0} for key in ("full_512", "n2_512", "n2_1024")}


def test_cells_take_their_steps_and_windows_from_the_committed_cells():
    cells = plan.plan_cells(SPEEDS, {"n512": 1000.0, "n1024": 500.0}, stage_b_questions_fraction=0.5)
    teacher = next(cell for cell in cells if cell["cell"].startswith("A (a)"))
    assert teacher["train_steps"] == plan.TRAIN_EPOCHS * plan.steps_per_epoch("n512_full_seed0")
    assert teacher["eval_windows"] == 4879 + 4869  # paragraphs and filled-512 windows of the committed cell
    assert teacher["train_hours"] == round(teacher["train_steps"] * 5.0 / 3600, 2)
    recipe = cells[0]
    assert recipe["train_hours"] == round(600 * 2048 / 1000.0 / 3600, 2)


def test_sessions_never_exceed_their_length_and_keep_the_cells_in_order():
    cells = [
        {"cell": "long", "seeds": 1, "train_hours": 3.0, "eval_hours": 0.5},
        {"cell": "short", "seeds": 2, "train_hours": 0.5, "eval_hours": 0.25},
    ]
    sessions = plan.sessions(cells, session_hours=2.0)
    assert all(session["hours"] <= 2.0 for session in sessions)
    units = [unit for session in sessions for unit in session["units"]]
    assert units == [
        "long, training part 1/2", "long, training part 2/2", "long, evaluation",
        "short, seed 0", "short, seed 0, evaluation", "short, seed 1", "short, seed 1, evaluation",
    ]  # fmt: skip
    # a teacher whose weights do not outlive the session: training and evaluation as one unit, never split
    teacher = {"cell": "teacher", "seeds": 1, "train_hours": 1.0, "eval_hours": 0.9, "one_session": True}
    later = {"cell": "more", "seeds": 1, "first_seed": 1, "train_hours": 0.5, "eval_hours": 0.2}
    sessions = plan.sessions([{**cells[1], "seeds": 1}, teacher, later], session_hours=2.0)
    assert [session["units"] for session in sessions] == [
        ["short", "short, evaluation"],
        ["teacher, with its evaluation"],
        ["more, seed 1", "more, seed 1, evaluation"],
    ]


def _run_folder(folder, learning_rate, mse_at_150):
    folder.mkdir()
    (folder / "run_args.json").write_text(json.dumps({"learning_rate": learning_rate, "layer_weights": "all"}))
    records = [
        {"step": 0, "eval_loss": 1.0, "eval_mse_layer_1": 0.5, "eval_mse_layer_2": 0.3, "eval_cosine": 0.1},
        {"step": 150, "loss": 0.5},
        {"step": 150, "eval_loss": 0.5, "eval_mse_layer_1": 0.4, "eval_mse_layer_2": mse_at_150, "eval_cosine": 0.05},
    ]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
    (folder / "results.json").write_text("{}")
    return folder


def test_the_recipe_is_the_lowest_last_layer_mse_with_ties_going_to_the_lower_learning_rate(tmp_path):
    runs = [
        results.read_run(_run_folder(tmp_path / "fast", 3e-4, 0.100)),
        results.read_run(_run_folder(tmp_path / "slow", 1e-4, 0.104)),
        results.read_run(_run_folder(tmp_path / "worse", 1e-5, 0.2)),
    ]
    assert runs[0]["last_layer"] == 2 and runs[0]["training_loss"] == [{"step": 150, "loss": 0.5}]
    assert results.select(runs, 150, tie=0.005)["chosen"] == "slow"
    assert results.select(runs, 150, tie=0.001)["chosen"] == "fast"
    with pytest.raises(ValueError, match="no evaluation at step 100"):
        results.select(runs, 100, tie=0.005)
