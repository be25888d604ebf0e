"""The long-context QA comparison driver: the grid's priority order, the recipe's batch sizes, per-question scores
against the SQuAD metric, the paired article bootstrap, and `run` end to end on a tiny model (resuming a training
from its checkpoint and redoing only a missing evaluation)."""

import copy
import json
import random
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO_ROOT, load_script
from transformers import RobertaConfig, RobertaModel

from blockbert_benchmarks.measuring.machine import machine_description, machine_hardware
from blockbert_experiments.long_context import LongContextConfig, build_long_context_sets
from blockbert_experiments.qa_comparison import runner as comparison_runner
from blockbert_experiments.qa_comparison.grid import (
    EPOCHS_GRID,
    GRID,
    LAYOUT_GRID,
    OBJECTIVE_GRID,
    PARAGRAPHS,
    RECIPE_GRID,
    Cell,
    ComparisonConfig,
    Recipe,
    batch_sizes,
    cell_recipe,
    eval_batch_size,
    grid_cells,
    select_cells,
)
from blockbert_experiments.qa_comparison.layout import cell_sets, training_file
from blockbert_experiments.qa_comparison.plan import estimated_train_minutes, format_plan, plan_comparison
from blockbert_experiments.qa_comparison.provenance import (
    demo_note,
    driver_commands,
    reading_notes,
    recipe_section,
    run_groups,
    weights_note,
)
from blockbert_experiments.qa_comparison.recipe_report import (
    apply_recipe_choice,
    epochs_choice,
    recipe_choice,
    run_choice,
    write_recipe_report,
)
from blockbert_experiments.qa_comparison.report import load_results, plot_label, write_report
from blockbert_experiments.qa_comparison.runner import run_comparison
from blockbert_experiments.qa_comparison.scores import (
    article_bootstrap_ratio,
    paired_article_bootstrap,
    question_scores,
    seed_t_interval,
    wider_interval,
)
from blockbert_experiments.qa_comparison.steps import convert_args, eval_args, train_args
from blockbert_hf.train.qa import SquadMetric, load_qa_dataset


SQUAD_SAMPLE = REPO_ROOT / "data" / "samples" / "squad_v1.1_dev_sample.json"


# ---------------------------------------------------------------------------------------------------------------------
# The grid and the recipe
# ---------------------------------------------------------------------------------------------------------------------

MANIFEST = {
    "sets": {
        name: {"file": f"{name}.json", "half": half, "questions": questions, "target_tokens": None}
        for name, half, questions in (
            ("train_article", "first", 10),
            ("dev_article", "dev", 3),
            ("article", "second", 3),
        )
    }
}
CHOSEN_RATE = {"cell": "dev_n512_full_lr0.0003", "learning_rate": 3e-4, "window_scoring": "raw"}


def _options(args: list[str]) -> dict[str, str]:
    """Each word of a command line and the next: an option and its value."""
    return dict(zip(args, args[1:]))


def test_cells_select_a_subset_in_grid_order_and_seeds_share_one_converted_model():
    assert len({cell.name for cell in GRID}) == len(GRID)
    chosen = select_cells(["n512_n3_8-2-2_seed1", "n512_full_seed0", "n1024_n2_10-2"])
    assert [cell.name for cell in chosen] == ["n512_full_seed0", "n1024_n2_10-2", "n512_n3_8-2-2_seed1"]
    assert select_cells([]) == list(GRID)
    with pytest.raises(ValueError, match="Unknown cell.*n512_full_seed0"):
        select_cells(["n512_full"])
    cells = {cell.name: cell for cell in GRID}
    for name, cell in cells.items():
        if name.endswith("_seed1"):
            assert cell.model_name == cells[name.replace("_seed1", "_seed0")].model_name


def test_a_cell_is_tested_on_its_sets_of_its_half_and_the_long_models_take_the_chosen_layout():
    cells = {cell.name: cell for cell in GRID}
    manifest = {"sets": {name: {"half": "second"} for name in ("paragraph", "window_512", "article", "sweep_512")}}
    manifest["sets"]["dev_article"] = {"half": "dev"}
    names = list(manifest["sets"])
    assert cell_sets(manifest, names, cells["n512_n2_10-2_seed0"]) == ["paragraph", "window_512"]
    assert cell_sets(manifest, names, cells["n1024_n2_10-2"]) == ["paragraph", "window_512", "article", "sweep_512"]
    assert cell_sets(MANIFEST, ["dev_article", "article"], RECIPE_GRID[0]) == ["dev_article"]
    assert cell_sets(MANIFEST, ["dev_article", "article"], GRID[0]) == ["article"]
    # The long BlockBERT models take the layout the recipe chose; the N = 512 models keep the question first.
    chosen = ComparisonConfig(long_window_layout="question_prefixed_blocks", long_block_relative_positions=True)
    laid_out = {cell.name: cell for cell in grid_cells(chosen)}
    long_names = [name for name, cell in laid_out.items() if cell.window_layout != "question_first"]
    assert long_names == ["n1024_n2_10-2", "n2048_n4_6-2-2-2"]
    long = laid_out["n1024_n2_10-2"]
    assert long.block_relative_positions and "block-relative" in long.model_name
    assert not laid_out["n512_n2_10-2_seed0"].block_relative_positions
    assert grid_cells(ComparisonConfig()) == GRID


def test_a_cells_own_recipe_values_replace_the_runs_and_reach_its_training_command():
    config = ComparisonConfig(learning_rate=1.0, num_train_epochs=9.0, negative_window_rate=1.0)
    screening = RECIPE_GRID[0]
    assert cell_recipe(config, screening) == Recipe(screening.learning_rate, 1.0, 0.08, None, 32)
    assert cell_recipe(config, EPOCHS_GRID[0]) == Recipe(1.0, 4.0, 0.08, None, 32)  # the epoch run: the run's rate
    assert cell_recipe(config, GRID[0]).learning_rate == 1.0  # a comparison cell follows the run's recipe
    args = train_args(config, screening, MANIFEST, train_minutes=10.0)
    options = _options(args)
    assert options["--learning_rate"] == str(screening.learning_rate) and options["--num_train_epochs"] == "1.0"
    assert options["--negative_window_rate"] == "0.08" and options["--train_file"].endswith("train_article.json")
    assert "--preprocessing_num_workers" not in args + eval_args(config, screening, MANIFEST, "dev_article")
    workers = ComparisonConfig(preprocessing_num_workers=4)
    for args in (train_args(workers, screening, MANIFEST, 10.0), eval_args(workers, GRID[0], MANIFEST, "article")):
        assert args[-2:] == ["--preprocessing_num_workers", "4"]


def test_a_cell_may_lay_out_windows_in_blocks_count_positions_per_block_and_evaluate_every_epoch():
    cell = Cell(
        "dev_long", 1024, "blockwise", 2, "10:2", train_set="train_article", eval_half="dev",
        window_layout="question_prefixed_blocks", block_relative_positions=True, epoch_eval_set="dev_article",
    )  # fmt: skip
    plain = Cell("dev_plain", 1024, "blockwise", 2, "10:2", train_set="train_article", eval_half="dev")
    assert cell.model_name == "blockwise-N1024-n2-10_2-block-relative" != plain.model_name
    config = ComparisonConfig()
    converted = convert_args(config, cell, Path("source"))
    assert "--block_relative_positions" in converted and _options(converted)["--block_size"] == "512"
    assert "--block_relative_positions" not in convert_args(config, plain, Path("source"))
    args = train_args(config, cell, MANIFEST, train_minutes=10.0)
    options = _options(args)
    assert options["--window_layout"] == "question_prefixed_blocks" and options["--eval_strategy"] == "epoch"
    assert "--do_eval" in args and options["--validation_file"].endswith("dev_article.json")
    plain_args = train_args(config, plain, MANIFEST, train_minutes=10.0)
    assert "--window_layout" not in plain_args and "--do_eval" not in plain_args
    question_first = replace(cell, name="dev_long_first", window_layout="question_first")
    first_args = train_args(config, question_first, MANIFEST, train_minutes=10.0)
    assert _options(first_args)["--window_layout"] == "question_first"  # not run_qa's default


def _screened(learning_rate: float, dev_f1: dict[str, dict[str, float]], epochs: float = 1.0) -> dict:
    """A screening cell's results as the recipe report reads them: dev F1 per set and window scoring rule."""
    sets = {
        name: {"by_window_scoring": {rule: {"f1": f1} for rule, f1 in rules.items()}} for name, rules in dev_f1.items()
    }
    return {"recipe": {"learning_rate": learning_rate, "num_train_epochs": epochs}, "sets": sets}


def _dev_run(learning_rate: float, relative: float, raw: float, epochs: float = 1.0, **cell) -> dict:
    """A run with the same F1 on each dev set under each window scoring rule, of a cell with these fields."""
    sets = ("dev_paragraph", "dev_window_512", "dev_article")
    results = _screened(learning_rate, {name: {"null_relative": relative, "raw": raw} for name in sets}, epochs)
    return {**results, "cell": cell}


def test_the_recipe_choice_takes_the_best_mean_dev_f1_and_the_better_rule_on_whole_articles():
    def cell(rate, paragraph, window, article_relative, article_raw):
        return _screened(
            rate,
            {
                "dev_paragraph": {"null_relative": paragraph, "raw": paragraph},
                "dev_window_512": {"null_relative": window, "raw": window},
                "dev_article": {"null_relative": article_relative, "raw": article_raw},
            },
        )

    results = {
        "a": cell(5e-5, 50.0, 45.0, 30.0, 20.0),
        "b": cell(1e-4, 60.0, 55.0, 20.0, 35.0),  # best mean under null_relative (45.0); raw wins on articles
        "c": cell(2e-4, 40.0, 40.0, 50.0, 10.0),  # best on articles alone: not the rule
    }
    assert recipe_choice(results) is None  # a screening run has no results yet
    results["d"] = cell(3e-4, 10.0, 10.0, 10.0, 10.0)
    evaluating = {**results["d"], "sets": {"dev_paragraph": results["d"]["sets"]["dev_paragraph"]}}
    assert recipe_choice({**results, "d": evaluating}) is None  # one still being evaluated: no choice, no error
    assert recipe_choice(results) == {"cell": "b", "learning_rate": 1e-4, "window_scoring": "raw"}


def _epoch_run(learning_rate: float, f1_after_each_epoch: list[float]) -> dict:
    """The epoch run's results as the recipe report reads them: dev_window_512 F1 after each epoch."""
    evaluations = [
        {"epoch": epoch, "step": 100 * epoch, "eval_loss": 1.0, "exact_match": f1 / 2, "f1": f1}
        for epoch, f1 in enumerate(f1_after_each_epoch, start=1)
    ]
    results = _screened(learning_rate, {}, epochs=4.0)
    results["train"] = {"epoch_evaluations": evaluations}
    return results


def test_one_four_epoch_run_at_the_chosen_rate_picks_the_epoch_count_with_the_best_dev_f1_after_it():
    assert epochs_choice({"ep4": _epoch_run(3e-4, [30.0, 50.0, 52.0])}, CHOSEN_RATE) is None  # still training
    assert epochs_choice({"ep4": _epoch_run(1e-4, [30.0, 50.0, 52.0, 53.0])}, CHOSEN_RATE) is None  # another rate
    best_after_three = {"ep4": _epoch_run(3e-4, [60.0, 50.0, 55.0, 54.0])}  # epoch 1 is not a candidate
    expected = {"cell": "ep4", "num_train_epochs": 3.0, "dev_window_512_f1": 55}
    assert epochs_choice(best_after_three, CHOSEN_RATE) == expected
    tie = {"ep4": _epoch_run(3e-4, [30.0, 52.0, 52.0, 52.0])}
    assert epochs_choice(tie, CHOSEN_RATE)["num_train_epochs"] == 2.0  # a tie goes to fewer epochs
    assert epochs_choice(best_after_three, None) is None  # no learning rate chosen yet


def test_the_layout_choice_takes_the_best_mean_under_the_chosen_rule_at_the_chosen_rate():
    first, prefixed = LAYOUT_GRID

    def run(cell, rate, relative, raw):
        fields = dict(window_layout=cell.window_layout, block_relative_positions=cell.block_relative_positions)
        return _dev_run(rate, relative, raw, **fields)

    def layout_choice(runs, rate):
        return run_choice(runs, LAYOUT_GRID, rate, "raw", ("window_layout", "block_relative_positions"))

    at_rate = {"learning_rate": 3e-4}
    runs = {first.name: run(first, 3e-4, 60.0, 40.0)}
    assert layout_choice(runs, at_rate) is None  # the other layout has no results yet
    runs[prefixed.name] = run(prefixed, 1e-4, 30.0, 50.0)  # another learning rate's run does not count
    assert layout_choice(runs, at_rate) is None
    runs[prefixed.name] = run(prefixed, 3e-4, 30.0, 45.0)  # better under raw, the chosen rule
    assert layout_choice(runs, at_rate) == {
        "cell": prefixed.name, "window_layout": "question_prefixed_blocks", "block_relative_positions": True
    }  # fmt: skip
    runs[prefixed.name] = run(prefixed, 3e-4, 30.0, 40.0)
    assert layout_choice(runs, at_rate)["cell"] == first.name  # a tie goes to the question first
    assert layout_choice(runs, None) is None  # no learning rate chosen yet


def test_the_objective_reaches_the_training_command_only_and_the_choice_takes_the_best_run_at_the_chosen_recipe():
    config = ComparisonConfig(learning_rate=3e-4, num_train_epochs=4.0)
    window, per_block = OBJECTIVE_GRID
    assert window.model_name == LAYOUT_GRID[1].model_name  # the layout run's converted model
    assert _options(train_args(config, per_block, MANIFEST, train_minutes=10.0))["--qa_objective"] == "per_block"
    assert "--qa_objective" not in train_args(config, window, MANIFEST, train_minutes=10.0)
    # the evaluations take the objective the trained model records
    assert "--qa_objective" not in eval_args(config, per_block, MANIFEST, "dev_article")
    assert "per-block objective" in per_block.label and "objective" not in window.label

    chosen = ComparisonConfig(
        long_window_layout="question_prefixed_blocks", long_block_relative_positions=True, long_qa_objective="per_block"
    )
    per_block_names = [cell.name for cell in grid_cells(chosen) if cell.qa_objective == "per_block"]
    assert per_block_names == ["n1024_n2_10-2", "n2048_n4_6-2-2-2"]
    with pytest.raises(ValueError, match="--long_qa_objective per_block .* needs --long_window_layout"):
        grid_cells(ComparisonConfig(long_qa_objective="per_block"))
    with pytest.raises(ValueError, match="qa_objective='block' is unknown"):
        grid_cells(ComparisonConfig(long_qa_objective="block"))

    def run(cell, epochs, raw):
        return _dev_run(3e-4, 30.0, raw, epochs, qa_objective=cell.qa_objective)

    def objective_choice(runs, recipe):
        return run_choice(runs, OBJECTIVE_GRID, recipe, "raw", ("qa_objective",))

    chosen_recipe = {"learning_rate": 3e-4, "num_train_epochs": 3.0}
    runs = {window.name: _dev_run(3e-4, 60.0, 40.0, 3.0, qa_objective="window")}
    assert objective_choice(runs, chosen_recipe) is None  # the other objective has no results yet
    runs[per_block.name] = run(per_block, 4.0, 50.0)  # another epoch count's run does not count
    assert objective_choice(runs, chosen_recipe) is None
    runs[per_block.name] = run(per_block, 3.0, 45.0)  # better under raw, the chosen rule
    assert objective_choice(runs, chosen_recipe) == {"cell": per_block.name, "qa_objective": "per_block"}
    runs[per_block.name] = run(per_block, 3.0, 40.0)
    assert objective_choice(runs, chosen_recipe)["qa_objective"] == "window"  # a tie goes to the window
    assert objective_choice(runs, None) is None  # no learning rate or epochs chosen yet


def test_the_recipe_report_tables_the_screening_then_the_epoch_curve_and_states_both_choices(tmp_path):
    measured = json.loads((REPO_ROOT / "results" / "qa_recipe" / "dev_n512_full_lr0.0001" / "results.json").read_text())

    def write(cell, learning_rate, epochs, f1, after_each_epoch=(), resumed=0):
        results = copy.deepcopy(measured)
        results["train"]["resumed_attempts"] = resumed
        results["cell"].update(
            name=cell.name,
            window_layout=cell.window_layout,
            block_relative_positions=cell.block_relative_positions,
            qa_objective=cell.qa_objective,
        )
        results["recipe"].update(learning_rate=learning_rate, num_train_epochs=epochs)
        for entry in results["sets"].values():
            entry["by_window_scoring"] = {rule: {"exact_match": f1, "f1": f1} for rule in ("null_relative", "raw")}
        results["train"]["epoch_evaluations"] = [
            {"epoch": epoch, "step": 250 * epoch, "eval_loss": 2.5, "exact_match": value - 10, "f1": value}
            for epoch, value in enumerate(after_each_epoch, start=1)
        ]
        (tmp_path / cell.name).mkdir()
        (tmp_path / cell.name / "results.json").write_text(json.dumps(results))

    config = ComparisonConfig(results_dir=str(tmp_path), grid="epochs", effective_batch_size=16)
    for cell, f1 in zip(RECIPE_GRID, (40.0, 50.0, 30.0, 45.0)):
        write(cell, cell.learning_rate, 1.0, f1)
    report = write_recipe_report(config)
    assert report["choice"]["learning_rate"] == 2e-4 and report["epochs"] is None
    text = (tmp_path / "README.md").read_text()
    assert "**Choice**: learning rate 0.0002" in text and "No epoch run has results yet." in text
    assert "| dev_n512_full_lr0.0001 | 0.0001 | 1 | 1.300 | 114 | bf16 autocast |" in text
    write(EPOCHS_GRID[0], 2e-4, 4.0, 54.0, after_each_epoch=(45.0, 52.0, 55.0, 53.0), resumed=1)
    report = write_recipe_report(config)
    assert report["epochs"]["num_train_epochs"] == 3.0
    assert report["pending"] == [c.name for c in LAYOUT_GRID + OBJECTIVE_GRID]
    epochs_part = (tmp_path / "README.md").read_text().split("## Epochs")[1]
    # the training loss logged last before each evaluation (the measured curve logs every 50 steps)
    assert "| dev_n512_full_ep4 | 3 | 750 | 1.452 | 2.500 | 45.0 | 55.0 |" in epochs_part
    assert "| dev_n512_full_ep4 | 0.0002 | 4 | 1.300 | 114 + the steps before 1 resume(s) |" in epochs_part
    assert "**Choice**: 3 epochs (dev_window_512 F1 55.0)." in epochs_part
    assert "- dev_n512_full_lr0.0001: not recorded" in epochs_part  # trained before machines were recorded
    assert "No layout run has results yet." in epochs_part
    assert "run --grid layout --learning_rate 0.0002 " in epochs_part
    comparison = ComparisonConfig(recipe_dir=str(tmp_path), results_dir=str(tmp_path / "comparison"))
    with pytest.raises(ValueError, match="no layout chosen yet: run"):
        apply_recipe_choice(comparison)
    for cell, f1 in zip(LAYOUT_GRID, (48.0, 51.0)):
        write(cell, 2e-4, 1.0, f1)
    report = write_recipe_report(config)
    assert report["layout"]["cell"] == "dev_n1024_n2_prefixed_blocks"
    assert report["pending"] == [c.name for c in OBJECTIVE_GRID] and report["objective"] is None
    layout_part = (tmp_path / "README.md").read_text().split("## The long model's window layout")[1]
    assert "| dev_n1024_n2_question_first | 0.0002 | 1 |" in layout_part
    assert "**Choice**: `question_prefixed_blocks`, positions restarting in every block." in layout_part
    # The objective's rule is written before its runs, with the command that runs them on the recipe chosen here.
    objective_part = layout_part.split("## The long model's training objective")[1]
    assert "A tie goes to `window`." in objective_part
    assert "No objective run has results yet." in objective_part and "**Choice**: not yet" in objective_part
    assert f"run --grid objective --recipe_dir {tmp_path} --data_dir $DATA_DIR" in objective_part
    # The comparison then trains on the recipe chosen here.
    chosen = apply_recipe_choice(comparison)
    assert (chosen.learning_rate, chosen.num_train_epochs, chosen.window_scoring) == (
        2e-4,
        3.0,
        report["choice"]["window_scoring"],
    )
    assert (chosen.long_window_layout, chosen.long_block_relative_positions) == ("question_prefixed_blocks", True)
    assert chosen.long_qa_objective == "window"  # until the objective is chosen
    for cell, f1 in zip(OBJECTIVE_GRID, (50.0, 52.0)):
        write(cell, 2e-4, 3.0, f1)
    report = write_recipe_report(config)
    assert report["objective"] == {"cell": "dev_n1024_n2_objective_per_block", "qa_objective": "per_block"}
    objective_part = (tmp_path / "README.md").read_text().split("## The long model's training objective")[1]
    assert "| dev_n1024_n2_objective_per_block | 0.0002 | 3 |" in objective_part
    assert "**Choice**: `per_block`." in objective_part and not report["pending"]
    chosen = apply_recipe_choice(comparison)
    assert chosen.long_qa_objective == "per_block"
    long_cell = next(cell for cell in grid_cells(chosen) if cell.name == "n1024_n2_10-2")
    options = _options(train_args(chosen, long_cell, MANIFEST, train_minutes=10.0))
    assert options["--learning_rate"] == "0.0002" and options["--num_train_epochs"] == "3.0"
    assert options["--window_layout"] == "question_prefixed_blocks" and options["--negative_window_rate"] == "0.08"
    assert options["--window_scoring"] == chosen.window_scoring and options["--qa_objective"] == "per_block"


def test_batch_sizes_keep_the_effective_batch_at_every_length():
    config = ComparisonConfig()
    cells = {n: Cell(f"n{n}", n) for n in (512, 1024, 2048)}
    assert {n: batch_sizes(config, cell) for n, cell in cells.items()} == {512: (8, 4), 1024: (4, 8), 2048: (2, 16)}
    odd = ComparisonConfig(effective_batch_size=12, train_tokens_per_batch=5 * 512)
    assert batch_sizes(odd, cells[512]) == (4, 3)  # the largest divisor of 12 that fits 5 windows
    assert batch_sizes(odd, replace(cells[512], effective_batch_size=8)) == (4, 2)  # a cell's own batch


# ---------------------------------------------------------------------------------------------------------------------
# Scores and the bootstrap
# ---------------------------------------------------------------------------------------------------------------------


def test_question_scores_average_to_the_squad_metric():
    rows = load_qa_dataset(str(SQUAD_SAMPLE)).to_list()
    rng = random.Random(0)
    predictions = {}
    for row in rows:  # exact answers, partial overlaps, other case and punctuation, and wrong answers
        gold = row["answers"]["text"][0]
        words = gold.split()
        predictions[row["id"]] = rng.choice(
            [gold, gold.upper() + ".", " ".join(words[: max(1, len(words) // 2)]), "the " + gold, "nothing at all"]
        )
    references = [(row["id"], row["answers"]["text"]) for row in rows]
    exact, f1 = question_scores(predictions, references)
    expected = SquadMetric(config_name="squad").compute(
        predictions=[{"id": key, "prediction_text": value} for key, value in predictions.items()],
        references=[{"id": row["id"], "answers": row["answers"]} for row in rows],
    )
    assert set(exact) == {0, 1} and any(0 < value < 1 for value in f1)  # partial answers score between 0 and 1
    assert 100 * np.mean(exact) == pytest.approx(expected["exact_match"], abs=1e-9)
    assert 100 * np.mean(f1) == pytest.approx(expected["f1"], abs=1e-9)


def _scores(seed=0, articles=6, per_article=20):
    rng = np.random.default_rng(seed)
    groups = np.repeat(np.arange(articles), per_article)
    a = rng.random(groups.size)
    b = np.clip(a + rng.normal(0.05, 0.2, groups.size), 0, 1)
    return a, b, groups


def test_bootstrap_is_deterministic_with_a_seed_and_has_no_width_for_identical_scores():
    a, b, groups = _scores()
    first = paired_article_bootstrap(a, b, groups, samples=2000, seed=3)
    assert first == paired_article_bootstrap(a, b, groups, samples=2000, seed=3)
    assert first != paired_article_bootstrap(a, b, groups, samples=2000, seed=4)
    assert first["difference"] == pytest.approx(float(np.mean(a - b)))
    assert first["low"] < first["difference"] < first["high"]
    assert (first["articles"], first["questions"]) == (6, 120)
    same = paired_article_bootstrap(a, a.copy(), groups, samples=500)
    assert same["difference"] == same["low"] == same["high"] == 0.0


def test_bootstrap_resamples_articles_not_questions():
    a, b, _ = _scores()
    # One article: every resample draws that article, so the interval has no width however the questions differ.
    single = paired_article_bootstrap(a, b, np.zeros(a.size, dtype=int), samples=500)
    assert single["low"] == single["high"] == pytest.approx(single["difference"])
    # Questions grouped by their difference (articles that agree within themselves) vary more between resamples than
    # the same questions spread one per article.
    order = np.argsort(a - b)
    by_difference = np.empty(a.size, dtype=int)
    by_difference[order] = np.repeat(np.arange(6), 20)
    grouped = paired_article_bootstrap(a, b, by_difference, samples=4000)
    spread = paired_article_bootstrap(a, b, np.arange(a.size), samples=4000)
    assert grouped["high"] - grouped["low"] > 2 * (spread["high"] - spread["low"])
    with pytest.raises(ValueError, match="one article per question"):
        paired_article_bootstrap(a, b, np.zeros(3, dtype=int))


def test_the_t_interval_over_seeds_matches_a_hand_computation_and_the_wider_interval_wins():
    # Differences -4, -6, -5: mean -5, standard deviation 1, standard error 1 / sqrt(3); t(0.975, 2) = 4.302653.
    interval = seed_t_interval([-4.0, -6.0, -5.0])
    half_width = 4.302652730 / 3**0.5
    assert interval["difference"] == pytest.approx(-5.0) and interval["seeds"] == 3
    assert (interval["low"], interval["high"]) == pytest.approx((-5 - half_width, -5 + half_width))
    assert seed_t_interval([-4.0]) is None  # one seed: no variation between seeds to see
    bootstrap = {"difference": -5.0, "low": -6.0, "high": -4.5, "articles": 10}
    wider = wider_interval(bootstrap, interval)
    assert (wider["from"], wider["low"], wider["excludes_zero"]) == ("t over seeds", interval["low"], True)
    assert wider["smallest_detectable_effect"] == pytest.approx(half_width)
    narrow = {**interval, "low": -5.1, "high": -4.9}
    assert wider_interval(bootstrap, narrow)["from"] == "article bootstrap"
    assert wider_interval(bootstrap, narrow)["smallest_detectable_effect"] == pytest.approx(0.75)


def test_the_ratio_interval_resamples_articles():
    # Article 0 scores 1 of 2 on each of its two questions, article 1 1 of 1: a resample of two articles gives 2/4,
    # 3/5 or 2/2, so the 95% interval runs from 0.5 to 1.
    interval = article_bootstrap_ratio([1, 1, 1], [2, 2, 1], [0, 0, 1], samples=2000)
    assert (interval["low"], interval["high"], interval["articles"]) == (0.5, 1.0, 2)
    same = article_bootstrap_ratio([0.5, 0.2, 0.9], [0.5, 0.2, 0.9], [0, 1, 2], samples=200)
    assert same["low"] == same["high"] == pytest.approx(1.0)


# ---------------------------------------------------------------------------------------------------------------------
# `run` end to end on a tiny model
# ---------------------------------------------------------------------------------------------------------------------

TINY_CELL = Cell("tiny_n2", 512, "blockwise", 2, "3:1")


@pytest.fixture(scope="module")
def tiny_setup(tokenizer, tmp_path_factory):
    root = tmp_path_factory.mktemp("qa_comparison")
    source = root / "source"
    config = RobertaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=66,
        pad_token_id=1,
    )
    RobertaModel(config).save_pretrained(source)
    tokenizer.save_pretrained(source)
    sets = LongContextConfig(
        sets=["train", "paragraph", "sweep", "article"],
        train_lengths=[512],
        sweep_lengths=[512, 1024],
        sweep_questions=4,
        article_questions=3,
        dev_titles=[],
    )
    build_long_context_sets(SQUAD_SAMPLE, root / "data", tokenizer, sets)
    return root


def _config(root, **overrides) -> ComparisonConfig:
    fields = dict(
        data_dir=str(root / "data"),
        squad_file=str(SQUAD_SAMPLE),
        source_model=str(root / "source"),
        work_dir=str(root / "work"),
        results_dir=str(root / "results"),
        effective_batch_size=4,
        train_tokens_per_batch=1024,
        eval_tokens_per_batch=4096,
        checkpoint_minutes=1e-6,  # a checkpoint every step
        max_train_samples=8,
        max_eval_samples=3,
        baseline=TINY_CELL.name,
        bootstrap_samples=200,
        in_process=True,
    )
    return ComparisonConfig(**{**fields, **overrides})


def test_run_end_to_end_then_resume_redoes_only_what_is_missing(tiny_setup, monkeypatch):
    root = tiny_setup
    config = _config(root)
    grid = [TINY_CELL]
    assert run_comparison(config, grid) == []

    results = json.loads((root / "results" / TINY_CELL.name / "results.json").read_text())
    sets = ["paragraph", "sweep_512", "sweep_1024", "article"]
    assert list(results["sets"]) == sets and results["finished"] and results["train"]["finished"]
    for name in sets:
        measured = results["sets"][name]
        assert measured["questions"] == 3 and measured["peak_rss_mb"] > 0 and measured["seconds_per_question"] >= 0
        # the per-question scores average to what run_qa's metric reported
        assert (measured["exact_match"], measured["f1"]) == (measured["metric_exact_match"], measured["metric_f1"])
        # the same logits scored under every window scoring rule; the run's rule is the one reported
        assert set(measured["by_window_scoring"]) == {"raw", "null_relative"} and measured["eval_loss"] > 0
        assert measured["by_window_scoring"][measured["window_scoring"]]["f1"] == measured["f1"]
    assert (
        results["recipe"]["per_device_train_batch_size"] == 2 and results["recipe"]["gradient_accumulation_steps"] == 2
    )
    # The recipe's attention dropout (0) replaces the source's (0.1) in fine-tuning.
    trained = json.loads((root / "work" / "cells" / TINY_CELL.name / "train" / "model" / "config.json").read_text())
    assert results["recipe"]["attention_probs_dropout_prob"] == trained["attention_probs_dropout_prob"] == 0.0
    assert json.loads((root / "source" / "config.json").read_text())["attention_probs_dropout_prob"] == 0.1
    # N = 512 reads position rows past the 64 the source was trained on: the results say how many it trained.
    assert results["source_model"]["sequence_length"] == 64
    # The training loss run_qa logged is copied (none here: fewer steps than its logging interval).
    assert results["train"]["loss_curve"] == []
    # The commands name the work and data folders, and the source (outside the repository) by its folder's name.
    model = f"$WORK_DIR/models/{TINY_CELL.model_name}"
    assert results["commands"][0].startswith(f"python examples/convert_roberta_to_blockbert.py source {model} ")
    assert (
        f"--train_file $DATA_DIR/train_512.json --do_train --output_dir $WORK_DIR/cells/{TINY_CELL.name}/train"
        in (results["commands"][1])
    )
    assert results["source_model"]["path"] == "source" and str(root) not in json.dumps(results)
    scores = json.loads((root / "results" / TINY_CELL.name / "scores.json").read_text())
    questions = json.loads((root / "results" / "questions.json").read_text())
    assert len(scores["article"]["f1"]) == 3 and len(questions["article"]["ids"]) == 3
    report = json.loads((root / "results" / "results.json").read_text())
    assert report["finished"] == [TINY_CELL.name]
    assert (root / "results" / "f1_vs_context_length.png").stat().st_size > 0
    readme = (root / "results" / "README.md").read_text()
    assert "## Results (EM / F1)" in readme and "examples/run_qa.py" in readme
    done = plan_comparison(config, grid)[0]
    assert (done.convert, done.train, done.eval_sets) == (False, "done", [])

    # A training killed after its last checkpoint and an evaluation killed before it finished.
    work = root / "work" / "cells" / TINY_CELL.name
    checkpoints = sorted((work / "train" / "checkpoints").iterdir())
    assert checkpoints, "the run should have checkpointed"
    shutil.rmtree(work / "train" / "model")
    (work / "eval" / "sweep_1024" / "measurements.json").unlink()
    pending = plan_comparison(config, grid)[0]
    assert pending.train == f"resume from step {checkpoints[-1].name.removeprefix('step_')}"
    assert pending.eval_sets == ["sweep_1024"]

    calls = []
    run_step = comparison_runner.run_step

    def recording_run_step(cfg, script, args, **options):
        calls.append([script, *args])
        return run_step(cfg, script, args, **options)

    monkeypatch.setattr(comparison_runner, "run_step", recording_run_step)
    assert run_comparison(config, grid) == []
    assert [call[0] for call in calls] == ["run_qa.py", "run_qa.py"]  # no conversion, one training, one evaluation
    assert "--resume" in calls[0] and "--do_train" in calls[0]
    assert "--do_eval" in calls[1] and any(arg.endswith("sweep_1024.json") for arg in calls[1])
    attempts = json.loads((work / "train_attempts.json").read_text())
    assert [attempt["resumed_from"] for attempt in attempts] == [None, checkpoints[-1].name]
    results = json.loads((root / "results" / TINY_CELL.name / "results.json").read_text())
    assert (results["train"]["attempts"], results["train"]["resumed_attempts"]) == (2, 1)
    # the killed attempt's time is not known: the cost table says the training time leaves it out
    assert "h + the steps before 1 resume(s) |" in (root / "results" / "README.md").read_text()

    # A run with nothing left to do rewrites the results, copying the training loss and the evaluations after each
    # epoch run_qa logged. The precision and machine are the training's own, not the later run's settings.
    metrics = [
        {"step": 50, "epoch": 0, "loss": 5.123456, "lr": 1e-5},
        {"step": 100, "epoch": 0, "loss": 4.5, "lr": 0},
        {"step": 100, "epoch": 0, "eval_loss": 3.21234, "eval_exact_match": 12.345, "eval_f1": 23.456},
    ]
    (work / "train" / "metrics.jsonl").write_text("".join(json.dumps(record) + "\n" for record in metrics))
    calls.clear()
    assert run_comparison(_config(root, mixed_precision="bf16"), grid) == [] and calls == []
    results = json.loads((root / "results" / TINY_CELL.name / "results.json").read_text())
    assert results["train"]["loss_curve"] == [{"step": 50, "loss": 5.1235}, {"step": 100, "loss": 4.5}]
    assert results["train"]["epoch_evaluations"] == [
        {"epoch": 1, "step": 100, "eval_loss": 3.2123, "exact_match": 12.35, "f1": 23.46}
    ]
    assert results["recipe"]["mixed_precision"] == "no"
    assert results["train"]["machines"] == [machine_description()]
    assert "| `tiny_n2` | 5.12 | 4.50 |" in (root / "results" / "README.md").read_text()

    # The command line: --dry_run prints the plan and `report` rewrites the report.
    cli = load_script("experiments/qa_comparison.py")
    assert cli.main(["report", *_cli_args(root)]) == 0
    assert cli.main(["bogus"]) == 2


@pytest.fixture(scope="module")
def tiny_dev_setup(tiny_setup, tokenizer, tmp_path_factory):
    """Dev sets for the recipe's grids: the sample's two articles and a renamed copy of each (first half: Sky and the
    Jacksonville copy, the dev article), the tiny source of `tiny_setup`."""
    root = tmp_path_factory.mktemp("qa_recipe")
    data = json.loads(SQUAD_SAMPLE.read_text(encoding="utf-8"))
    sky, jacksonville = data["data"]
    copies = copy.deepcopy([jacksonville, sky])
    for article in copies:
        article["title"] += "_(copy)"
        for paragraph in article["paragraphs"]:
            for question in paragraph["qas"]:
                question["id"] += "-copy"
    data["data"] = [sky, copies[0], jacksonville, copies[1]]
    (root / "four.json").write_text(json.dumps(data), encoding="utf-8")
    sets = LongContextConfig(sets=["train_article", "dev"], dev_titles=["Jacksonville,_Florida_(copy)"])
    build_long_context_sets(root / "four.json", root / "data", tokenizer, sets)
    return root


@pytest.mark.slow  # two fine-tunings of 4 epochs and six evaluations: about 30 s on two cores
def test_the_objective_screen_runs_both_objectives_on_the_dev_articles_and_the_report_chooses(
    tiny_dev_setup, tiny_setup, capsys
):
    """A dry run of `run --grid objective --recipe_dir` on a tiny model (N = 128, b = 64, heads 3:1): the recipe
    folder holds the recipe chosen so far (the committed screening, epoch and layout runs), the two objective cells
    train on its learning rate and epochs, and the report then chooses between them."""
    recipe = tiny_dev_setup / "recipe"
    shutil.copytree(REPO_ROOT / "results" / "qa_recipe", recipe)
    config = _config(
        tiny_setup, data_dir=str(tiny_dev_setup / "data"), work_dir=str(tiny_dev_setup / "work"),
        results_dir=str(recipe), recipe_dir=str(recipe), grid="objective", doc_stride=16, max_train_samples=4,
        checkpoint_minutes=1e6,  # no checkpoint: this run is not resumed
    )  # fmt: skip
    config = apply_recipe_choice(config)
    assert (config.learning_rate, config.num_train_epochs, config.long_qa_objective) == (2e-4, 4.0, "window")
    tiny = [replace(cell, max_seq_length=128, heads_per_shift="3:1") for cell in OBJECTIVE_GRID]
    assert run_comparison(config, tiny) == []

    found = {cell.name: json.loads((recipe / cell.name / "results.json").read_text()) for cell in tiny}
    for cell in tiny:
        results = found[cell.name]
        assert results["finished"] and results["cell"]["qa_objective"] == cell.qa_objective
        assert set(results["sets"]) == {"dev_paragraph", "dev_window_512", "dev_article"}
        assert (results["recipe"]["learning_rate"], results["recipe"]["num_train_epochs"]) == (2e-4, 4.0)
        train_command = results["commands"][1]
        assert ("--qa_objective per_block" in train_command) == (cell.qa_objective == "per_block")
        assert "--window_layout question_prefixed_blocks" in train_command
        trained = recipe.parent / "work" / "cells" / cell.name / "train" / "model" / "config.json"
        assert json.loads(trained.read_text())["question_answering"]["qa_objective"] == cell.qa_objective
    readme = (recipe / "README.md").read_text()
    objective_part = readme.split("## The long model's training objective")[1]
    assert all(f"| {cell.name} | 0.0002 | 4 |" in objective_part for cell in tiny)
    means = {cell.name: _mean_dev_f1(found[cell.name]) for cell in tiny}
    winner = max(tiny, key=lambda cell: (means[cell.name], cell.qa_objective == "window"))
    assert f"**Choice**: `{winner.qa_objective}`." in objective_part
    assert apply_recipe_choice(replace(config, grid="comparison")).long_qa_objective == winner.qa_objective

    cli = load_script("experiments/qa_comparison.py")
    args = ["run", "--dry_run", "--grid", "objective", "--recipe_dir", str(recipe), "--results_dir", str(recipe)]
    assert cli.main([*args, "--data_dir", config.data_dir, "--work_dir", config.work_dir]) == 0
    printed = capsys.readouterr().out
    assert all(cell.name in printed for cell in OBJECTIVE_GRID) and "Estimated total" in printed


def _mean_dev_f1(results: dict) -> float:
    return float(np.mean([entry["by_window_scoring"]["null_relative"]["f1"] for entry in results["sets"].values()]))


def test_a_run_with_the_paragraphs_cell_and_no_squad_file_stops_before_any_work(tiny_setup, tmp_path):
    config = _config(tiny_setup, squad_file=None, work_dir=str(tmp_path / "work"), results_dir=str(tmp_path / "r"))
    grid = [TINY_CELL, Cell("tiny_paragraphs", 512, "full", train_set=PARAGRAPHS)]
    with pytest.raises(FileNotFoundError, match="pass it as --squad_file"):
        run_comparison(config, grid)
    assert not (tmp_path / "work").exists() and not (tmp_path / "r").exists()


def test_the_paragraphs_cell_trains_on_the_first_half_of_the_file_the_sets_came_from(tmp_path):
    cell = Cell("n512_paragraphs", 512, "full", train_set=PARAGRAPHS)
    manifest = {"source": {"file": "dev-v1.1.json.gz", "sha256": "0" * 64}, "sets": {}}
    config = ComparisonConfig(work_dir=str(tmp_path / "work"), data_dir=str(tmp_path / "data"))
    assert config.squad_file is None  # no default: the file is not part of the repository
    assert training_file(config, cell, manifest) == tmp_path / "work" / "data" / "dev-v1.1.first-half.json"
    with pytest.raises(FileNotFoundError, match="first half of dev-v1.1.json.gz.*pass it as --squad_file"):
        training_file(config, cell, manifest, create=True)
    config.squad_file = str(SQUAD_SAMPLE)
    with pytest.raises(ValueError, match="is not the file .* was built from"):
        training_file(config, cell, manifest, create=True)


def _cli_args(root):
    return ["--data_dir", str(root / "data"), "--results_dir", str(root / "results"), "--work_dir", str(root / "work")]


def test_dry_run_prints_the_plan_in_priority_order(tiny_setup, capsys):
    root = tiny_setup
    cli = load_script("experiments/qa_comparison.py")
    cells = ["n512_n3_8-2-2_seed0", "n512_full_seed0"]
    assert cli.main(["run", "--dry_run", "--cells", *cells, *_cli_args(root)]) == 0
    printed = capsys.readouterr().out
    assert printed.index("n512_full_seed0") < printed.index("n512_n3_8-2-2_seed0") and "Estimated total" in printed
    assert "n1024_n2_10-2" not in printed
    plan = format_plan(_config(root), plan_comparison(_config(root, cells=cells)))
    assert plan.splitlines()[1].startswith("n512_full_seed0")


def test_report_without_results_and_with_a_bad_baseline_still_writes(tmp_path):
    report = write_report(ComparisonConfig(results_dir=str(tmp_path / "results"), baseline="missing"))
    assert report["finished"] == [] and len(report["pending"]) == len(GRID)
    assert "## Grid" in (tmp_path / "results" / "README.md").read_text()


CELLS = {cell.name: cell for cell in GRID}
TABLE4_SEEDS = tuple(
    CELLS[name] for name in ("n512_full_seed0", "n512_n2_10-2_seed0", "n512_full_seed1", "n512_n2_10-2_seed1")
)


def _write_cell(folder, cell: Cell, f1: list[float], test_set="sweep_512"):
    measured = dict(target_tokens=512, exact_match=0.0, f1=100 * float(np.mean(f1)), seconds_per_question=0.1)
    results = {
        "cell": {**vars(cell)}, "label": cell.label, "train": {"finished": True, "seconds": 60.0},
        "sets": {test_set: {**measured, "peak_rss_mb": 500.0}}, "finished": True,
        "commands": [f"python examples/run_qa.py --output_dir {cell.name}"],
    }  # fmt: skip
    scores = {test_set: {"ids_sha256": "same questions", "em": [0] * len(f1), "f1": f1}}
    (folder / cell.name).mkdir(parents=True)
    (folder / cell.name / "results.json").write_text(json.dumps(results))
    (folder / cell.name / "scores.json").write_text(json.dumps(scores))


def _report(folder: Path, f1_by_cell: list[tuple[Cell, list[float]]], grid=GRID, samples=300) -> dict:
    """The report over `grid` of finished cells with these per-question sweep_512 F1 (0..1), two questions an
    article."""
    for cell, f1 in f1_by_cell:
        _write_cell(folder, cell, f1)
    articles = [index // 2 for index in range(len(f1_by_cell[0][1]))]
    (folder / "questions.json").write_text(json.dumps({"sweep_512": {"article": articles, "ids": [], "titles": []}}))
    return write_report(ComparisonConfig(results_dir=str(folder), bootstrap_samples=samples), grid)


def test_report_gives_intervals_against_the_baseline_and_the_seed_spread(tmp_path):
    folder = tmp_path / "results"
    baseline, other, second_seed = (
        CELLS[name] for name in ("n512_full_seed0", "n512_n2_10-2_seed0", "n512_full_seed1")
    )
    report = _report(folder, [
        (baseline, [0.5] * 8),
        (other, [0.9] * 8),  # better on every question: the interval excludes zero
        (second_seed, [0.5] * 8),  # the same scores: no spread
    ])  # fmt: skip
    difference = report["differences_to_baseline"][other.name]["sweep_512"]["f1"]
    assert difference["difference"] == pytest.approx(40.0) and difference["excludes_zero"]
    assert (difference["articles"], difference["questions"]) == (4, 8)
    spread = report["seed_spread"][second_seed.name]["sweep_512"]["f1"]
    assert spread["low"] == spread["high"] == 0.0 and not spread["excludes_zero"]
    readme = (folder / "README.md").read_text()
    assert "**+40.0 [+40.0, +40.0]**" in readme and "## Seed spread" in readme
    assert report["finished"] == [baseline.name, other.name, second_seed.name]


def test_report_repeats_the_comparison_at_each_seed_against_the_baselines_configuration(tmp_path):
    full_0, blockwise_0, full_1, blockwise_1 = TABLE4_SEEDS  # full and n=2 at seeds 0 and 1
    long_n = next(cell for cell in GRID if cell.max_seq_length == 1024)
    report = _report(tmp_path, [
        (full_0, [0.5] * 8),
        (blockwise_0, [0.5] * 8),
        (full_1, [0.2] * 8),  # a seed that trained worse
        (blockwise_1, [0.3] * 8),  # 10 above full attention at its own seed, 20 below the baseline
        (long_n, [0.5] * 8),  # seed 0: compared with the baseline only
    ])  # fmt: skip
    assert report["differences_to_baseline"][blockwise_1.name]["sweep_512"]["f1"]["difference"] == pytest.approx(-20)
    same_seed = report["differences_at_the_same_seed"]
    assert list(same_seed) == [blockwise_1.name]
    assert same_seed[blockwise_1.name]["sweep_512"]["f1"]["difference"] == pytest.approx(10)
    assert report["seed_spread"][full_1.name]["sweep_512"]["f1"]["difference"] == pytest.approx(-30)
    assert "## Differences to the baseline's configuration at the same seed" in (tmp_path / "README.md").read_text()


def test_verdicts_average_the_paired_difference_over_seeds_and_resolve_only_gaps_beyond_both_seed_spreads(tmp_path):
    folder = tmp_path / "results"
    full_0, blockwise_0, full_1, blockwise_1 = TABLE4_SEEDS  # full and n=2 at seeds 0 and 1
    sparse = next(cell for cell in GRID if cell.attention_pattern == "sparse_fixed")  # one seed
    report = _report(folder, [
        (full_0, [0.50, 0.60] * 4),
        (full_1, [0.52, 0.62] * 4),  # full attention's seed spread: 2 points
        (blockwise_0, [0.40, 0.50] * 4),  # -10 at seed 0
        (blockwise_1, [0.46, 0.56] * 4),  # -6 at seed 1; its spread: 6 points
        (sparse, [0.49, 0.60] * 4),  # -0.5 against seed 0 alone
    ])  # fmt: skip
    verdicts = report["seed_averaged_verdicts"]
    blockwise = verdicts[blockwise_0.name]["sweep_512"]
    assert blockwise["seeds"] == [0, 1] and blockwise["f1"]["difference"] == pytest.approx(-8.0)
    assert blockwise["seed_spread"] == pytest.approx({"configuration": 6.0, "baseline": 2.0})
    assert blockwise["f1"]["excludes_zero"] and blockwise["verdict"] == "resolved"  # 8 > 6 and 2
    one_seed = verdicts[sparse.name]["sweep_512"]
    assert one_seed["seeds"] == [0] and one_seed["f1"]["difference"] == pytest.approx(-0.5)
    assert one_seed["seed_spread"]["configuration"] is None
    assert one_seed["f1"]["excludes_zero"] and one_seed["verdict"] == "within the seed spread"  # 0.5 < 2
    # The t-interval over the per-seed differences (-10, -6) by hand: mean -8, standard deviation sqrt(8), standard
    # error 2, t(0.975, 1 degree of freedom) = 12.7062: half-width 25.41, wider than the bootstrap's (no width).
    assert blockwise["per_seed_differences"] == pytest.approx([-10.0, -6.0])
    assert (blockwise["t_interval"]["low"], blockwise["t_interval"]["high"]) == pytest.approx((-33.4124, 17.4124))
    assert blockwise["interval"]["from"] == "t over seeds" and not blockwise["interval"]["excludes_zero"]
    assert blockwise["interval"]["smallest_detectable_effect"] == pytest.approx(25.4124)
    assert blockwise["against_each_reference_seed"] == pytest.approx({"0": 48 - 55, "1": 48 - 57})
    assert one_seed["t_interval"] is None and one_seed["interval"]["from"] == "article bootstrap"
    readme = (folder / "README.md").read_text()
    row = "| 0, 1 | -8.0 [-8.0, -8.0] | -8.0 [-33.4, +17.4] | -8.0 [-33.4, +17.4] | 25.4 | -7.0 (0), -9.0 (1) |"
    assert f"| `{blockwise_0.name}` | sweep_512 {row} 6.0 / 2.0 | resolved | no |" in readme
    assert f"| `{sparse.name}` | sweep_512 | 0 | -0.5 [" in readme and "| one seed / 2.0 | within the seed" in readme

    # One seed on each side: a gap beyond its interval still waits for a seed spread; a gap inside it is unresolved.
    for name, blockwise_f1, verdict in (("one_seed", 0.4, "no seed spread yet"), ("mixed", None, "smaller than")):
        scores = [blockwise_f1] * 8 if blockwise_f1 else [0.7, 0.7, 0.3, 0.3] * 2  # +20 and -20 by article
        report = _report(tmp_path / name, [(full_0, [0.5] * 8), (blockwise_0, scores)])
        entry = report["seed_averaged_verdicts"][blockwise_0.name]["sweep_512"]
        assert entry["seed_spread"] == {"configuration": None, "baseline": None}
        assert entry["verdict"].startswith(verdict)


def test_report_compares_a_long_n_cell_with_full_attention_at_its_own_n(tmp_path):
    full_512, blockwise_512 = CELLS["n512_full_seed0"], CELLS["n512_n2_10-2_seed0"]
    blockwise_1024 = next(cell for cell in GRID if cell.max_seq_length == 1024)
    paragraphs_1024 = replace(blockwise_1024, name="n1024_paragraphs", train_set=PARAGRAPHS)
    full_1024 = replace(CELLS["n512_full_article_seed0"], name="n1024_full", max_seq_length=1024)  # same data
    scores = [
        (full_512, [0.5] * 8),
        (blockwise_512, [0.4] * 8),  # its full-attention partner is the baseline: reported once
        (blockwise_1024, [0.3] * 8),
        (paragraphs_1024, [0.3] * 8),  # no full-attention cell trained on paragraphs at N=1024
        (full_1024, [0.1] * 8),
    ]
    same_window = _report(tmp_path, scores, grid=[cell for cell, _ in scores])["differences_at_the_same_window"]
    assert list(same_window) == [blockwise_1024.name]
    assert same_window[blockwise_1024.name]["sweep_512"]["f1"]["difference"] == pytest.approx(20)
    assert "## Differences to full attention at the same N" in (tmp_path / "README.md").read_text()


@pytest.mark.parametrize(
    ("file", "text", "problem"),
    [
        ("results.json", '{"cell": {"name": "n512', "is not readable JSON"),
        ("results.json", '{"label": "x"}', "has no cell, train, sets, finished, commands"),
        ("scores.json", "[1, 2", "is not readable JSON"),
        ("scores.json", '{"sweep_512": {"em": []}}', "has no sweep_512.ids_sha256, sweep_512.f1"),
    ],
)
def test_report_skips_a_cell_with_an_unreadable_file_naming_it_and_reports_the_others(
    tmp_path, caplog, file, text, problem
):
    folder = tmp_path / "results"
    baseline, other = TABLE4_SEEDS[:2]
    _report(folder, [(baseline, [0.5] * 4), (other, [0.9] * 4)], samples=50)
    broken = folder / other.name / file
    broken.write_text(text)
    with caplog.at_level("WARNING"):
        report = write_report(ComparisonConfig(results_dir=str(folder), bootstrap_samples=50))
    assert list(report["cells"]) == [baseline.name]
    assert f"{broken}: {problem}" in caplog.text and "skipped" in caplog.text
    readme = (folder / "README.md").read_text()
    assert f"`{baseline.name}`" in readme and f"`{other.name}` ({file}" in readme


def test_run_with_an_unknown_cell_names_the_valid_cells_before_looking_for_the_data(tmp_path, capsys):
    cli = load_script("experiments/qa_comparison.py")
    for dry_run in ([], ["--dry_run"]):
        args = ["run", "--cells", "bogus", *dry_run, "--data_dir", str(tmp_path / "no-data")]
        args += ["--results_dir", str(tmp_path / "results"), "--work_dir", str(tmp_path / "work")]
        assert cli.main(args) == 2
        error = capsys.readouterr().err
        assert "Unknown cell(s) ['bogus']" in error and GRID[0].name in error and "manifest" not in error
    assert not (tmp_path / "results").exists() and not (tmp_path / "work").exists()


def test_training_estimate_uses_only_times_measured_on_this_hardware(tmp_path):
    """A cell trained on a GPU says nothing of how long its sibling takes on a CPU (and the checkpoint interval follows
    the estimate), so only finished cells whose training ran on this machine's processor and GPU count."""
    config = ComparisonConfig(results_dir=str(tmp_path), learning_rate=2e-4, num_train_epochs=4.0)
    seed0, seed1 = CELLS["n512_full_seed0"], CELLS["n512_full_seed1"]
    manifest = {"sets": {"train_512": {"questions": 100, "half": "first", "target_tokens": 512}}}
    from_window_costs = estimated_train_minutes(config, seed0, manifest)
    here = machine_description()
    elsewhere = here.split(" (", 1)[0] + " (16 logical CPUs visible, torch uses 16 threads), GPU NVIDIA H200; Python"
    estimates = {}
    for label, machine in (("elsewhere", elsewhere), ("here", here)):
        folder = tmp_path / seed1.name
        folder.mkdir(exist_ok=True)
        results = {"train": {"finished": True, "seconds": 600.0, "machines": [machine]}}
        (folder / "results.json").write_text(json.dumps(results))
        estimates[label] = estimated_train_minutes(config, seed0, manifest)
    assert estimates == {"elsewhere": from_window_costs, "here": 10.0} and from_window_costs != 10.0
    assert machine_hardware(elsewhere) == (here.split(" (", 1)[0], "GPU NVIDIA H200") != machine_hardware(here)


def test_report_compares_the_long_arm_with_sliding_windows_of_512_trained_on_the_same_data(tmp_path):
    baseline, windows_512 = CELLS["n512_full_seed0"], CELLS["n512_full_article_seed0"]
    long_cells = [cell for cell in GRID if cell.max_seq_length > 512]
    paragraphs_1024 = replace(long_cells[0], name="n1024_paragraphs", train_set=PARAGRAPHS)  # no N = 512 partner
    scores = [(baseline, [0.5] * 8), (windows_512, [0.6] * 8), (long_cells[0], [0.7] * 8)]
    scores += [(long_cells[1], [0.5] * 8), (paragraphs_1024, [0.3] * 8)]
    sliding = _report(tmp_path, scores, grid=[cell for cell, _ in scores])["differences_to_sliding_windows"]
    assert list(sliding) == [cell.name for cell in long_cells]
    assert [sliding[cell.name]["sweep_512"]["f1"]["difference"] for cell in long_cells] == pytest.approx([10, -10])
    assert "## The long-document arm: differences to sliding windows of 512" in (tmp_path / "README.md").read_text()


def test_report_sets_whole_articles_against_the_same_questions_own_paragraphs_under_both_scoring_rules(tmp_path):
    """The ratio divides by the paragraph F1 of the article set's questions only (found by id, in their own order),
    and the rules' difference pairs each question's two scores."""
    folder = tmp_path / "results"
    cell = CELLS["n512_full_article_seed0"]
    _write_cell(folder, cell, [0.5] * 4)
    paragraph = {"null_relative": {"em": [0] * 6, "f1": [1.0, 0.2, 0.8, 0.4, 0.6, 0.0]}}
    paragraph["raw"] = paragraph["null_relative"]
    article = {"null_relative": {"em": [1, 0, 0, 1], "f1": [0.6, 0.4, 0.3, 0.5]}}
    article["raw"] = {"em": [0, 0, 0, 1], "f1": [0.2, 0.4, 0.3, 0.5]}
    scores = json.loads((folder / cell.name / "scores.json").read_text())
    for name, by_rule in (("paragraph", paragraph), ("article", article)):
        scores[name] = {"ids_sha256": name, **by_rule["null_relative"], "by_window_scoring": by_rule}
    (folder / cell.name / "scores.json").write_text(json.dumps(scores))
    results = json.loads((folder / cell.name / "results.json").read_text())
    results["sets"]["article"] = {**results["sets"]["sweep_512"], "f1": 45.0}
    results["sets"]["article"]["by_window_scoring"] = {
        "null_relative": {"exact_match": 50.0, "f1": 45.0},
        "raw": {"exact_match": 25.0, "f1": 35.0},
    }
    (folder / cell.name / "results.json").write_text(json.dumps(results))
    questions = {
        "sweep_512": {"article": [0, 0, 1, 1], "ids": [], "titles": []},
        "paragraph": {"ids": ["a", "b", "c", "d", "e", "f"], "article": [0, 0, 1, 1, 2, 2], "titles": []},
        "article": {"ids": ["e", "a", "c", "f"], "article": [0, 1, 1, 0], "titles": []},
    }
    (folder / "questions.json").write_text(json.dumps(questions))
    report = write_report(ComparisonConfig(results_dir=str(folder), bootstrap_samples=300))
    measured = report["whole_articles"][cell.name]
    own = 100 * np.mean([0.6, 1.0, 0.8, 0.0])  # e, a, c, f
    assert measured["by_window_scoring"]["null_relative"]["paragraph_f1"] == pytest.approx(own)
    assert measured["by_window_scoring"]["null_relative"]["ratio"] == pytest.approx(45 / own)
    assert measured["by_window_scoring"]["raw"]["ratio"] == pytest.approx(35 / own)
    assert measured["null_relative_minus_raw"]["difference"] == pytest.approx(10)
    assert measured["null_relative_minus_raw"]["articles"] == 2
    # The ratio's interval resamples the article set's two articles: e, f (article 0: whole-article F1 0.6 + 0.5 over
    # paragraph F1 0.6 + 0.0) and a, c (article 1: 0.4 + 0.3 over 1.0 + 0.8); its ends are each article drawn twice.
    ratio = measured["by_window_scoring"]["null_relative"]
    assert (ratio["ratio_low"], ratio["ratio_high"]) == pytest.approx((0.7 / 1.8, 1.1 / 0.6))
    assert "## Whole articles against the questions' own paragraphs" in (folder / "README.md").read_text()


def test_the_long_arm_averaged_over_seeds_gives_the_t_interval_each_seed_and_both_seed_spreads(tmp_path):
    """Each long configuration against sliding windows of 512 averaged over the seeds both have: the per-seed
    differences give the t-interval, the seed-averaged F1 meets every sliding-window seed, and both spreads show."""
    windows_0, windows_1 = CELLS["n512_full_article_seed0"], CELLS["n512_full_article_seed1"]
    long_0 = next(cell for cell in GRID if cell.max_seq_length == 1024)
    long_1 = replace(long_0, name="n1024_seed1", seed=1)
    wide = next(cell for cell in GRID if cell.max_seq_length == 2048)  # one seed
    scores = [
        (windows_0, [0.60] * 8),
        (windows_1, [0.64] * 8),  # sliding windows' seed spread: 4 points
        (long_0, [0.50] * 8),  # -10 at seed 0
        (long_1, [0.58] * 8),  # -6 at seed 1
        (wide, [0.70] * 8),  # +10 against seed 0 alone
    ]
    verdicts = _report(tmp_path, scores, grid=[cell for cell, _ in scores])["long_arm_verdicts"]
    two_seeds = verdicts[long_0.name]["sweep_512"]
    assert two_seeds["seeds"] == [0, 1] and two_seeds["per_seed_differences"] == pytest.approx([-10.0, -6.0])
    assert (two_seeds["t_interval"]["low"], two_seeds["t_interval"]["high"]) == pytest.approx((-33.4124, 17.4124))
    assert two_seeds["against_each_reference_seed"] == pytest.approx({"0": 54 - 60, "1": 54 - 64})
    assert two_seeds["seed_spread"] == pytest.approx({"configuration": 8.0, "baseline": 4.0})
    one_seed = verdicts[wide.name]["sweep_512"]
    assert one_seed["t_interval"] is None
    assert one_seed["against_each_reference_seed"] == pytest.approx({"0": 10.0, "1": 6.0})
    assert one_seed["seed_spread"] == pytest.approx({"configuration": None, "baseline": 4.0})
    readme = (tmp_path / "README.md").read_text().split("## The long-document arm averaged over seeds")[1]
    assert f"| `{wide.name}` | sweep_512 | 0 | +10.0 [+10.0, +10.0] | - | +10.0 [+10.0, +10.0] | 0.0 |" in readme
    assert "| +10.0 (0), +6.0 (1) | one seed / 4.0 | resolved | yes |" in readme


# ---------------------------------------------------------------------------------------------------------------------
# The report's provenance: the recipe and commands from the cells' records, and what the data let one conclude
# ---------------------------------------------------------------------------------------------------------------------

COMMITTED = REPO_ROOT / "results" / "qa_comparison"


def _committed_records(folder: Path) -> Path:
    """The committed cells' results.json (without their per-question scores) in `folder`."""
    for path in COMMITTED.glob("*/results.json"):
        (folder / path.parent.name).mkdir(parents=True)
        shutil.copy(path, folder / path.parent.name / "results.json")
    return folder


def _provenance(folder: Path) -> list[str]:
    """The generated texts of the README that the cells' records and the question list fix."""
    config = ComparisonConfig(results_dir="results/qa_comparison")
    results = load_results(replace(config, results_dir=str(folder)))
    questions = json.loads((COMMITTED / "questions.json").read_text())
    return [recipe_section(results), driver_commands(results, config, GRID), reading_notes(results, questions)]


def test_the_committed_report_states_the_recipe_and_commands_its_cells_recorded(tmp_path):
    """results/qa_comparison/README.md says what each cell ran as the cell's results.json records it (the report
    command's own defaults, 1 epoch at 5e-5, are no cell's recipe) and runs the cells with those options; a record
    that disagrees with it is found."""
    readme = (COMMITTED / "README.md").read_text()
    folder = _committed_records(tmp_path / "records")
    for text in _provenance(folder):
        assert text in readme
    assert "5 of them (Immune_system, Civil_disobedience, Economic_inequality, Kenya, Rhine)" in readme
    path = folder / "n512_n2_10-2_seed1" / "results.json"
    record = json.loads(path.read_text())
    record["recipe"]["learning_rate"] = 1e-4
    path.write_text(json.dumps(record))
    recipe, commands, _ = _provenance(folder)
    assert recipe not in readme and "| 0.0001 | `n512_n2_10-2_seed1` |" in recipe
    assert commands not in readme and "--cells n512_n2_10-2_seed1 --learning_rate 0.0001" in commands


def test_the_driver_commands_run_each_cell_with_its_recorded_recipe(tmp_path):
    """Each `run` line, parsed as the command line parses it, gives every cell of its group the learning rate,
    epochs, negative rate, batches, precisions, window scoring and layout its record holds."""
    cli = comparison_runner
    results = load_results(ComparisonConfig(results_dir=str(_committed_records(tmp_path / "records"))))
    lines = driver_commands(results, ComparisonConfig(), GRID).replace("\\\n    ", "").splitlines()
    runs = [line.split("qa_comparison.py ", 1)[1].split() for line in lines if "qa_comparison.py run" in line]
    assert len(runs) == len(run_groups(results, "comparison")) == 1  # every committed cell ran one recipe
    for words in runs:
        options = vars(cli.build_parser().parse_args(words))
        del options["command"]
        config = ComparisonConfig(**options)
        for cell in grid_cells(config):
            if cell.name not in (options["cells"] or results):
                continue
            record, recipe = results[cell.name], results[cell.name]["recipe"]
            made = cell_recipe(config, cell)
            assert (made.learning_rate, made.num_train_epochs) == (recipe["learning_rate"], recipe["num_train_epochs"])
            assert made.negative_window_rate == recipe["negative_window_rate"]
            batches = (recipe["per_device_train_batch_size"], recipe["gradient_accumulation_steps"])
            assert batch_sizes(config, cell) == batches
            assert (
                f"--per_device_eval_batch_size {eval_batch_size(config, cell.max_seq_length)} "
                in record["commands"][-1]
            )
            assert (config.mixed_precision, config.eval_mixed_precision) == ("bf16", "no")
            assert {config.window_scoring} == {measured["window_scoring"] for measured in record["sets"].values()}
            assert (cell.window_layout, cell.block_relative_positions) == (
                record["cell"]["window_layout"],
                record["cell"]["block_relative_positions"],
            )


def test_cells_whose_recipes_differ_get_one_run_each_naming_them(tmp_path):
    folder = tmp_path / "results"
    first, second = TABLE4_SEEDS[:2]
    for cell, rate in ((first, 2e-4), (second, 1e-4)):
        _write_cell(folder, cell, [0.5] * 4)
        path = folder / cell.name / "results.json"
        record = json.loads(path.read_text())
        record["recipe"] = {"learning_rate": rate, "num_train_epochs": 4.0, "effective_batch_size": 16}
        path.write_text(json.dumps(record))
    results = load_results(ComparisonConfig(results_dir=str(folder)))
    assert [cells for cells, _ in run_groups(results, "comparison")] == [[first.name], [second.name]]
    commands = driver_commands(results, ComparisonConfig(), GRID)
    assert f"--cells {first.name} --learning_rate 0.0002" in commands
    assert f"--cells {second.name} --learning_rate 0.0001" in commands
    section = recipe_section(results)
    assert f"| learning rate | 0.0002 | `{first.name}` |" in section and "| 0.0001 | the other 1 |" in section
    assert "| epochs | 4 | all 2 |" in section and "| not recorded | all 2 |" in section


def test_the_notes_name_the_demos_test_articles_and_the_cells_that_were_only_converted():
    questions = {"paragraph": {"titles": ["Kenya", "Not_in_the_demo", "Rhine"], "article": [0, 0, 1, 2], "ids": []}}
    note = demo_note(questions)
    assert "2 of them (Kenya, Rhine) are test articles here, with 3 of the 4 `paragraph` questions" in note
    assert demo_note({"paragraph": {"titles": ["Not_in_the_demo"], "article": [0], "ids": []}}) == ""
    full, blockwise = ({"cell": vars(cell)} for cell in TABLE4_SEEDS[:2])  # converted only
    note = weights_note({"a": blockwise, "b": full})
    assert note.startswith("**Converted and fine-tuned") and "every cell here starts" in note and "Table 4" in note
    assert "Table 4" not in weights_note({"b": full})  # full attention alone: no blockwise model to compare at N = 512
    assert weights_note({}) == ""


def _encoder(folder: Path, **fields) -> Path:
    """A distilled encoder's folder (config and weights; the weights are not read here)."""
    from blockbert_hf.model.configuration_blockbert import BlockBertConfig

    config = BlockBertConfig(
        hidden_size=48, num_attention_heads=12, num_hidden_layers=1, intermediate_size=96, vocab_size=100,
        max_position_embeddings=514, pad_token_id=1, **fields,
    )  # fmt: skip
    config.save_pretrained(folder)
    (folder / "model.safetensors").write_bytes(b"weights")
    (folder / "tokenizer.json").write_text("{}")
    return folder


def test_the_plot_names_each_line_by_how_its_model_reads_a_long_context():
    full = {"max_seq_length": 512, "attention_pattern": "full", "num_blocks": 1, "heads_per_shift": None, "seed": 1}
    blockwise = {**full, "max_seq_length": 1024, "attention_pattern": "blockwise", "num_blocks": 2}
    assert plot_label(full) == "full attention, sliding windows of 512 (seed 1)"
    assert plot_label({**blockwise, "heads_per_shift": "10:2", "seed": 0}) == (
        "BlockBERT, 1024 tokens at once, n = 2 (10:2) (seed 0)"
    )


# ---------------------------------------------------------------------------------------------------------------------
# Cells that start from a self-distilled encoder and are task-distilled from another cell


def test_stage_a_of_the_distillation_comparison_reads_the_dev_articles_first_on_one_cpu_recipe():
    from blockbert_experiments.qa_comparison.grid import DISTILLED_ENCODER_N512, DISTILLED_TABLE4_GRID

    cells = {cell.name: cell for cell in DISTILLED_TABLE4_GRID}
    converted, distilled, task_distilled = (
        cells["n512_n2_10-2_seed0"],
        cells["n512_n2_10-2_distilled_seed0"],
        cells["n512_n2_10-2_distilled_kd_seed0"],
    )
    assert {(cell.learning_rate, cell.num_train_epochs, cell.training_set) for cell in cells.values()} == {
        (2e-4, 2.0, "train_512")
    }
    assert converted.distilled_from is None and converted.teacher is None
    assert distilled.distilled_from == task_distilled.distilled_from == DISTILLED_ENCODER_N512
    assert (distilled.teacher, task_distilled.teacher) == (None, "n512_full_seed0")
    assert cells["n512_full_seed0"].attention_pattern == "full"
    # the dev articles come before the test sets, in manifest order, whatever half the cell's own
    manifest = {"sets": {name: {"half": half} for name, half in [
        ("train_512", "first"), ("dev_paragraph", "dev"), ("dev_window_512", "dev"), ("dev_article", "dev"),
        ("paragraph", "second"), ("window_512", "second"), ("article", "second"),
    ]}}  # fmt: skip
    names = list(manifest["sets"])[1:]
    assert cell_sets(manifest, names, distilled) == ["dev_paragraph", "dev_window_512", "paragraph", "window_512"]
    assert cell_sets(manifest, names, GRID[2]) == ["paragraph", "window_512"]  # the comparison's cells: unchanged
    assert "distilled_from" not in converted.record() and distilled.record()["distilled_from"] == DISTILLED_ENCODER_N512
    assert "teacher" not in distilled.record() and task_distilled.record()["teacher"] == "n512_full_seed0"
    assert distilled.model_name == task_distilled.model_name != converted.model_name


def test_the_prefixed_stage_a_arm_restarts_positions_in_two_blocks_of_256_of_the_distilled_encoder(tmp_path):
    from blockbert_experiments.qa_comparison.grid import DISTILLED_ENCODER_N512, DISTILLED_TABLE4_GRID
    from blockbert_experiments.qa_comparison.layout import STARTING_MODEL_FILE
    from blockbert_experiments.qa_comparison.runner import _convert

    cells = {cell.name: cell for cell in DISTILLED_TABLE4_GRID}
    prefixed, distilled = cells["n512_n2_10-2_distilled_prefixed_seed0"], cells["n512_n2_10-2_distilled_seed0"]
    layout = dict(window_layout="question_first", block_relative_positions=False, group_by_length=True)
    assert replace(prefixed, name=distilled.name, **layout) == distilled  # (c) but for the layout and its batches
    assert prefixed.record()["group_by_length"] is False and "group_by_length" not in distilled.record()
    training = {"file": "train_512.json", "half": "first", "questions": 10, "target_tokens": 512}
    manifest = {"sets": {"train_512": training}}
    train = " ".join(train_args(ComparisonConfig(), prefixed, manifest, 60.0))
    assert "--window_layout question_prefixed_blocks" in train and "--teacher" not in train
    assert "--group_by_length" not in train and "--group_by_length" in " ".join(
        train_args(ComparisonConfig(), distilled, manifest, 60.0)
    )
    # the encoder: distilled at N = 512 with positions running on (BERT positions, 512 rows)
    blockwise = dict(attention_pattern="blockwise", num_blocks=2, heads_per_shift="10:2")
    _encoder(tmp_path / DISTILLED_ENCODER_N512, **blockwise)
    config = ComparisonConfig(grid="distilled_table4", distilled_dir=str(tmp_path), work_dir=str(tmp_path / "work"))
    _convert(config, prefixed, tmp_path / "unused-source")
    model = tmp_path / "work" / "models" / prefixed.model_name
    saved = json.loads((model / "config.json").read_text())
    assert saved["block_relative_positions"] is True and saved["block_size"] == 256
    assert json.loads((model / STARTING_MODEL_FILE).read_text())["config_overrides"] == {
        "block_relative_positions": True, "block_size": 256
    }  # fmt: skip
    from blockbert_hf.model.configuration_blockbert import BlockBertConfig

    assert BlockBertConfig.from_pretrained(model).max_sequence_length == 512
    # other heads than the encoder's are written into the copy; an encoder of another N is refused, naming both
    twelve_zero = replace(distilled, heads_per_shift="12:0")
    _convert(config, twelve_zero, tmp_path / "unused-source")
    copied = tmp_path / "work" / "models" / twelve_zero.model_name
    assert json.loads((copied / STARTING_MODEL_FILE).read_text())["config_overrides"] == {"heads_per_shift": [12, 0]}
    with pytest.raises(ValueError, match="has N = 1024 but its distilled encoder .* has N = 512"):
        _convert(config, replace(distilled, max_seq_length=1024), tmp_path / "unused-source")


def test_a_task_distilled_cell_from_a_distilled_encoder_caches_its_teachers_logits_and_needs_only_them_later(
    tiny_setup, tmp_path
):
    from blockbert_experiments.qa_comparison.runner import _convert

    root = tiny_setup
    teacher = Cell("tiny_full", 512, "full", eval_sets=("paragraph",))
    student = replace(
        TINY_CELL, name="tiny_kd", distilled_from="tiny-distilled", teacher="tiny_full", eval_sets=("paragraph",)
    )
    config = _config(
        root, work_dir=str(tmp_path / "work"), results_dir=str(tmp_path / "results"),
        distilled_dir=str(tmp_path / "distilled"), baseline="tiny_full", report_after_each_cell=False,
    )  # fmt: skip
    # refused before any work: no distilled encoder, then no teacher (neither its logits nor its model)
    with pytest.raises(FileNotFoundError, match="no distilled encoder tiny-distilled"):
        run_comparison(config, [student])
    _convert(replace(config, work_dir=str(tmp_path / "converted")), TINY_CELL, root / "source")
    shutil.copytree(tmp_path / "converted" / "models" / TINY_CELL.model_name, tmp_path / "distilled" / "tiny-distilled")
    with pytest.raises(FileNotFoundError, match="task-distilled from tiny_full, which has neither cached logits"):
        run_comparison(config, [student])

    # the teacher's cell alone writes its logits over the student's windows, before the teacher's weights are gone
    cache = tmp_path / "results" / "teacher_logits" / "tiny_full-train_512-N512-window.safetensors"
    assert run_comparison(replace(config, cells=["tiny_full"]), [teacher, student]) == []
    assert cache.is_file() and not (tmp_path / "work" / "cells" / "tiny_kd").exists()
    command = json.loads(cache.with_suffix(".json").read_text())["command"]
    assert command.endswith("--teacher_logits_only") and "--output_dir $WORK_DIR/cells/tiny_kd/train" in command
    shutil.rmtree(tmp_path / "work" / "cells" / "tiny_full")
    assert run_comparison(config, [student]) == []  # a later session, without the teacher's weights
    results = json.loads((tmp_path / "results" / "tiny_kd" / "results.json").read_text())
    assert results["finished"] and results["source_model"]["distilled_from"] == "tiny-distilled"
    assert results["commands"][0].startswith(f"# $WORK_DIR/models/{student.model_name}: a copy of $DISTILLED_DIR/")
    train_command = results["commands"][1]
    assert "--teacher_model_name_or_path $WORK_DIR/cells/tiny_full/train/model" in train_command
    assert "--distillation_temperature 2.0 --distillation_alpha 0.5" in train_command
    assert "--teacher_logits " in train_command and cache.name in train_command


def _write_stage_a_cell(folder: Path, name: str, f1_by_set: dict[str, list[float]]):
    """A finished Stage A cell whose per-question F1 (0..1) on each set is given."""
    results = {
        "cell": {"name": name},
        "train": {"finished": True, "seconds": 3600.0, "loss_curve": [{"step": 50, "loss": 1.5}], "machines": ["cpu"]},
        "sets": {s: {"exact_match": 0.0, "f1": 100 * float(np.mean(f1))} for s, f1 in f1_by_set.items()},
        "commands": [f"python examples/run_qa.py --output_dir {name}"],
    }
    scores = {s: {"em": [0] * len(f1), "f1": f1} for s, f1 in f1_by_set.items()}
    (folder / name).mkdir(parents=True)
    (folder / name / "results.json").write_text(json.dumps(results))
    (folder / name / "scores.json").write_text(json.dumps(scores))


def test_the_stage_a_report_chooses_the_distilled_arm_on_the_dev_articles_and_states_the_target(tmp_path):
    from blockbert_experiments.qa_comparison.runner import write_grid_report

    folder = tmp_path / "results"
    articles = [0, 0, 1, 1, 2, 2, 3, 3]
    sets = {"dev_window_512": [0, 1], "window_512": articles}
    (folder).mkdir()
    (folder / "questions.json").write_text(json.dumps({s: {"article": a, "ids": []} for s, a in sets.items()}))

    def cell(name, dev, test):
        _write_stage_a_cell(folder, name, {"dev_window_512": [dev] * 2, "window_512": list(test)})

    cell("n512_full_seed0", 0.6, [0.6] * 8)
    cell("n512_full_seed1", 0.6, [0.62] * 8)  # seed spread of (a): 2 F1
    cell("n512_n2_10-2_seed0", 0.3, [0.3] * 8)
    cell("n512_n2_10-2_distilled_seed0", 0.5, [0.55] * 8)
    cell("n512_n2_10-2_distilled_kd_seed0", 0.504, [0.6] * 8)  # better on dev, but within the tie: (c) is kept
    config = ComparisonConfig(grid="distilled_table4", results_dir=str(folder), bootstrap_samples=200)
    assert write_grid_report(config)["choice"]["arm"] is None  # (e) has not run
    assert "(c), (d) and (e) all need seed-0 F1" in (folder / "README.md").read_text()
    cell("n512_n2_10-2_distilled_prefixed_seed0", 0.503, [0.7] * 8)  # within the tie of (c) as well
    summary = write_grid_report(config)
    assert summary["choice"] == {"arm": "c", "dev_f1": {"c": 50.0, "d": 50.4, "e": 50.3}}
    # (a) averaged over its two seeds (61 F1) minus (c) (55): the target of 5 is missed, by the seed-averaged gap
    verdict = summary["verdict"]
    assert verdict["gap"] == pytest.approx(6.0) and not verdict["target_met"] and not verdict["with_confidence"]
    a_minus_b = summary["comparisons"]["a-b"]["window_512"]
    assert a_minus_b["difference"] == pytest.approx(31.0) and a_minus_b["status"] == "resolved"
    assert a_minus_b["spread_used"] == [pytest.approx(2.0), pytest.approx(2.0)]  # (b)'s one seed: (a)'s spread
    readme = (folder / "README.md").read_text()
    assert "**The distilled arm is (c)**" in readme and "**Target (5 F1, goal 2): missed.**" in readme
    assert "So far on seeds (a) 0, 1; (c) 0: the rule judges the target once both have their second seed." in readme
    assert json.loads((folder / "results.json").read_text())["verdict"]["gap"] == pytest.approx(6.0)

    # (d) more than 0.5 above (c) on the dev articles is chosen, and then meets the target
    shutil.rmtree(folder / "n512_n2_10-2_distilled_kd_seed0")
    cell("n512_n2_10-2_distilled_kd_seed0", 0.52, [0.6] * 8)
    summary = write_grid_report(config)
    assert summary["choice"]["arm"] == "d" and summary["verdict"]["target_met"] and summary["verdict"]["goal_met"]
    assert summary["comparisons"]["d-b"]["window_512"]["status"] == "resolved"

    # a later arm must beat the one kept, not the first: (e) 0.3 above (d) stays below the tie, 0.6 above replaces it
    for dev_f1, chosen in ((0.523, "d"), (0.526, "e")):
        shutil.rmtree(folder / "n512_n2_10-2_distilled_prefixed_seed0")
        cell("n512_n2_10-2_distilled_prefixed_seed0", dev_f1, [0.7] * 8)
        assert write_grid_report(config)["choice"]["arm"] == chosen
    assert summary["comparisons"]["a-e"]["window_512"]["difference"] == pytest.approx(61 - 70)

    # whether distillation helped: (e) against its converted control (f), in the same layout
    assert "**Did self-distillation help?** Not known yet: (f) has no `window_512` results." in readme
    for control_f1, helped in ((0.6, "Yes"), (0.69, "Not resolved")):  # 10 F1 apart, then 1 (below (a)'s spread)
        shutil.rmtree(folder / "n512_n2_10-2_prefixed_seed0", ignore_errors=True)
        cell("n512_n2_10-2_prefixed_seed0", 0.4, [control_f1] * 8)
        effect = write_grid_report(config)["distillation_effect"]
        assert effect["helped"] is (helped == "Yes") and not effect["hurt"]
        assert (
            f"**Did self-distillation help?** {helped}: (e) minus (f) on `window_512`"
            in (folder / "README.md").read_text()
        )
    assert effect["status"] == "unresolved: within the seed spread"


def test_the_stage_a_report_splits_the_filled_contexts_by_the_block_that_holds_the_answer(tmp_path):
    from blockbert_experiments.qa_comparison.runner import write_grid_report
    from blockbert_experiments.qa_comparison.scores import ids_digest

    folder = tmp_path / "results"
    folder.mkdir()
    ids = ["q0", "q1", "q2", "q3"]
    (folder / "questions.json").write_text(json.dumps({"window_512": {"article": [0, 0, 1, 1], "ids": ids}}))
    for name, f1 in (("n512_full_seed0", [0.6, 0.8, 0.4, 1.0]), ("n512_n2_10-2_distilled_seed0", [0.5, 0.7, 0.1, 0])):
        _write_stage_a_cell(folder, name, {"window_512": f1})
        scores = json.loads((folder / name / "scores.json").read_text())
        scores["window_512"]["ids_sha256"] = ids_digest(ids)
        (folder / name / "scores.json").write_text(json.dumps(scores))
    config = ComparisonConfig(grid="distilled_table4", results_dir=str(folder), bootstrap_samples=50)
    assert write_grid_report(config)["f1_by_answer_block"] == {}  # no answer positions yet
    # the answer starts at token 10, 255, 256 and in no window: the last question counts in neither block
    positions = {"command": "python experiments/answer_blocks.py ...", "sets": {
        "window_512": {"ids_sha256": ids_digest(ids), "answer_token": [10, 255, 256, None]},
        "dev_window_512": {"ids_sha256": ids_digest(["other"]), "answer_token": [3]},
    }}  # fmt: skip
    (folder / "answer_blocks.json").write_text(json.dumps(positions))
    by_block = write_grid_report(config)["f1_by_answer_block"]
    assert list(by_block) == ["window_512"] and by_block["window_512"]["questions"] == {"first": 2, "second": 1}
    assert by_block["window_512"]["f1"]["a"] == {"first": pytest.approx(70.0), "second": pytest.approx(40.0)}
    assert by_block["window_512"]["f1"]["c"] == {"first": pytest.approx(60.0), "second": pytest.approx(10.0)}
    readme = (folder / "README.md").read_text()
    assert "| window_512 | at token 256 or later | 1 | 40.0 | - | 10.0 | - | - | - |" in readme

    # positions of other questions than the scored ones are not read
    positions["sets"]["window_512"]["ids_sha256"] = ids_digest(ids[::-1])
    (folder / "answer_blocks.json").write_text(json.dumps(positions))
    assert write_grid_report(config)["f1_by_answer_block"] == {}


def test_answer_blocks_finds_the_answer_token_as_run_qa_lays_out_its_windows(tokenizer):
    from blockbert_experiments.qa_comparison.answer_blocks import answer_tokens

    context = " ".join(f"word{index}" for index in range(60)) + " the answer is here."
    answer = context.index("answer")
    squad = {"data": [{"title": "t", "paragraphs": [{"context": context, "qas": [
        {"id": "near", "question": "Which?", "answers": [{"answer_start": 0, "text": "word0"}]},
        {"id": "far", "question": "Which?", "answers": [{"answer_start": answer, "text": "answer"}]},
    ]}]}]}  # fmt: skip
    near, far = answer_tokens(tokenizer, squad, ["near", "far"], max_seq_length=32, doc_stride=8)
    windows = tokenizer("Which?", context, truncation="only_second", max_length=32, stride=8,
                        return_overflowing_tokens=True)  # fmt: skip
    assert near == windows.sequence_ids(0).index(1)  # the first context token of the first window
    answer_id = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(" answer")[0])
    holding = next(ids for ids in windows["input_ids"] if answer_id in ids)
    assert far == holding.index(answer_id) and far > near
    with pytest.raises(ValueError, match="not in the data"):
        answer_tokens(tokenizer, squad, ["missing"], max_seq_length=32, doc_stride=8)
