"""`benchmarks/qa_pipeline_speed.py`: the questions it reads and, end to end (slow), the four runs it reports."""

import copy
import json

import pytest
import torch
from conftest import REPO_ROOT, load_script, make_model, tiny_config

from blockbert_hf import BlockBertForQuestionAnswering
from blockbert_hf.tokenization import match_tokenizer_to_config


SCRIPT = REPO_ROOT / "benchmarks" / "qa_pipeline_speed.py"
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


@pytest.mark.slow
def test_the_four_runs_answer_and_are_reported(tmp_path, tokenizer):
    model_folder, tokenizer = tmp_path / "qa", copy.deepcopy(tokenizer)
    config = tiny_config(vocab_size=len(tokenizer), max_position_embeddings=258)  # N = 256: room for real questions
    match_tokenizer_to_config(tokenizer, config)
    make_model(BlockBertForQuestionAnswering, config).save_pretrained(model_folder)
    tokenizer.save_pretrained(model_folder)
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
    assert "| ONNX Runtime int8 |" in markdown.read_text()
