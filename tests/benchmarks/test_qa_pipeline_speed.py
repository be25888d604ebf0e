"""`benchmarks/qa_pipeline_speed.py`: the questions it reads, the int8 models it accepts and, end to end (slow), the
runs it reports (the per-token int8 among them) with the CPU's VNNI; `benchmarks/int8_recipe.py`: the variants it
measures (slow)."""

import copy
import json

import pytest
import torch
from conftest import REPO_ROOT, load_script, make_model, tiny_config

from blockbert_hf import BlockBertForQuestionAnswering
from blockbert_hf.onnx.export import QUANTIZATION_REPORT
from blockbert_hf.onnx.quantization import DEFAULT_ORT_RECIPE, Int8Recipe, cpu_has_vnni
from blockbert_hf.tokenization import match_tokenizer_to_config


SCRIPT = REPO_ROOT / "benchmarks" / "qa_pipeline_speed.py"
RECIPE_SCRIPT = REPO_ROOT / "benchmarks" / "int8_recipe.py"
SQUAD_SAMPLE = REPO_ROOT / "data" / "samples" / "squad_v1.1_dev_sample.json"


def test_questions_come_with_their_paragraph_and_their_whole_article():
    module = load_script(SCRIPT)
    questions = module.read_questions(str(SQUAD_SAMPLE), ["Sky_(United_Kingdom)"], max_questions=0)
    assert len(questions) == 108 and {row["title"] for row in questions} == {"Sky_(United_Kingdom)"}
    document = questions[0]["document"]
    assert all(row["document"] == document and row["context"] in document for row in questions)
    assert len(module.read_questions(str(SQUAD_SAMPLE), None, max_questions=5)) == 5
    with pytest.raises(ValueError, match="no article titled 'Nowhere'"):
        module.read_questions(str(SQUAD_SAMPLE), ["Nowhere"], 0)


def test_an_int8_model_quantized_otherwise_is_refused(tmp_path):
    """A folder whose int8 model was made by another recipe (an earlier release's ONNX Runtime defaults, or one
    without a report) would be timed under today's name: refused, with the command that re-exports it."""
    module = load_script(SCRIPT)
    with pytest.raises(ValueError, match="not quantized with today's recipe .* --quantize --overwrite"):
        module.check_int8_recipe(tmp_path)
    report = {"recipe": DEFAULT_ORT_RECIPE.resolved().to_dict()}
    (tmp_path / QUANTIZATION_REPORT).write_text(json.dumps(report))
    with pytest.raises(ValueError, match="records {'activations': 'per_tensor'"):
        module.check_int8_recipe(tmp_path)
    report = {"recipe": Int8Recipe().resolved().to_dict()}
    (tmp_path / QUANTIZATION_REPORT).write_text(json.dumps(report))
    assert module.check_int8_recipe(tmp_path) == report


def save_tiny_qa_model(folder, tokenizer):
    tokenizer = copy.deepcopy(tokenizer)
    config = tiny_config(vocab_size=len(tokenizer), max_position_embeddings=258)  # N = 256: room for real questions
    match_tokenizer_to_config(tokenizer, config)
    make_model(BlockBertForQuestionAnswering, config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)


@pytest.mark.slow
def test_every_run_answers_and_is_reported(tmp_path, tokenizer):
    model_folder = tmp_path / "qa"
    save_tiny_qa_model(model_folder, tokenizer)
    output, markdown = tmp_path / "speed.json", tmp_path / "speed.md"
    arguments = ["--model_folder", str(model_folder), "--squad_file", str(SQUAD_SAMPLE), "--max_questions", "3"]
    torch.manual_seed(0)
    load_script(SCRIPT).main([*arguments, "--output", str(output), "--markdown", str(markdown)])
    results = json.loads(output.read_text())
    module = load_script(SCRIPT)
    for section in ("paragraph", "document"):
        assert list(results[section]) == list(module.RUNS)
        assert results[section][module.RUNS[1]]["same_answers_as_padded"] == 3  # padding-free: the same answers
        assert results[section][module.RUNS[2]]["same_answers_as_padded"] == 3  # ONNX Runtime fp32: the same
    assert (
        "| ONNX Runtime int8 |" in markdown.read_text() and "| ONNX Runtime int8, per token |" in markdown.read_text()
    )
    assert results["int8_per_token"]["recipe"] == Int8Recipe(activations="per_token").resolved().to_dict()
    assert "activations quantized per token, smoothed with strength 0.5" in markdown.read_text()
    assert results["cpu_has_vnni"] == cpu_has_vnni() and "VNNI" in markdown.read_text()
    assert results["int8"]["recipe"] == Int8Recipe().resolved().to_dict()
    assert results["int8"]["verification_answers"].endswith("/18")


@pytest.mark.slow
def test_the_recipe_variants_are_measured_against_fp32(tmp_path, tokenizer):
    model_folder = tmp_path / "qa"
    save_tiny_qa_model(model_folder, tokenizer)
    output = tmp_path / "recipes.json"
    module = load_script(RECIPE_SCRIPT)
    variants = {"before": DEFAULT_ORT_RECIPE, "chosen": module.CHOSEN}
    torch.manual_seed(0)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(module, "VARIANTS", variants)
        arguments = ["--model_folder", str(model_folder), "--squad_file", str(SQUAD_SAMPLE), "--max_questions", "3"]
        module.main([*arguments, "--title", "Jacksonville,_Florida", "--output", str(output)])
    results = json.loads(output.read_text())
    assert results["titles"] == ["Jacksonville,_Florida"] and results["questions"] == 3
    assert [row["name"] for row in results["variants"]] == ["before", "chosen"]
    assert [row["chosen"] for row in results["variants"]] == [False, True]
    for row in results["variants"]:
        for context in ("paragraph", "document"):
            assert 0 <= row[context]["same_answers_as_fp32"] <= 3 and "f1_change" in row[context]
