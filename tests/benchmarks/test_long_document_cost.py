"""`benchmarks/long_document_cost.py`: the long-document arm's three models (sliding windows of the source's N, and
BlockBERT reading 2 and 4 times as many tokens with question-prefixed blocks), timed and measured on every set."""

import copy
import json
import shutil

import pytest
from conftest import REPO_ROOT, load_script
from transformers import RobertaConfig


SCRIPT = REPO_ROOT / "benchmarks" / "long_document_cost.py"
SQUAD_SAMPLE = REPO_ROOT / "data" / "samples" / "squad_v1.1_dev_sample.json"


@pytest.fixture
def source(tmp_path, tokenizer):
    """A tiny RoBERTa source of 128 positions with 12 heads (the shifts 10:2 and 6:2:2:2) and its tokenizer."""
    folder, tokenizer = tmp_path / "source", copy.deepcopy(tokenizer)
    config = RobertaConfig(
        vocab_size=len(tokenizer), hidden_size=24, num_hidden_layers=1, num_attention_heads=12, intermediate_size=48,
        max_position_embeddings=130, pad_token_id=1, bos_token_id=0, eos_token_id=2,
    )  # fmt: skip
    config.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_every_model_is_timed_and_measured_on_every_set(tmp_path, source):
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(SQUAD_SAMPLE, data / "paragraphs.json")
    output, markdown = tmp_path / "cost.json", tmp_path / "cost.md"
    arguments = ["--data_dir", str(data), "--sets", "paragraphs", "--source_model", str(source)]
    load_script(SCRIPT).main([*arguments, "--max_questions", "2", "--output", str(output), "--markdown", str(markdown)])
    results = json.loads(output.read_text())
    assert [(m["max_seq_length"], m["num_blocks"]) for m in results["models"]] == [(128, 1), (256, 2), (512, 4)]
    assert [m["window_layout"] for m in results["models"]][1:] == ["question_prefixed_blocks"] * 2
    assert [m["windows_per_forward"] for m in results["models"]] == [32, 16, 8]  # 4,096 tokens each
    measured = results["sets"]["paragraphs"]
    assert measured["questions"] == 2 and measured["longest_context_tokens"] > 128  # several windows at N = 128
    for model in results["models"]:
        entry = measured["models"][model["name"]]
        assert entry["seconds_per_question"] > 0 and entry["peak_mb_longest"] > 0
    assert "| paragraphs | 2 |" in markdown.read_text()
    # Each pipeline reads windows of its model's N (not the source tokenizer's shorter length).
    pipelines = load_script(SCRIPT).build_pipelines(str(source))
    assert [qa.tokenizer.model_max_length for qa in pipelines.values()] == [128, 256, 512]


def test_a_missing_set_is_named_with_how_to_build_it(tmp_path, source, capsys):
    with pytest.raises(SystemExit):
        load_script(SCRIPT).main(["--data_dir", str(tmp_path), "--sets", "sweep_512", "--source_model", str(source)])
    assert "has no sweep_512.json: build the sets with experiments/build_long_context_qa.py" in capsys.readouterr().err
