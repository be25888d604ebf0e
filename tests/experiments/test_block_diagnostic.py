"""The block-1 diagnostic (`experiments/block_diagnostic.py`): a model whose heads never read block 0 shows no
difference between the true and a shuffled block 0; a model with a head that reads block 0 (or full attention) does."""

import json

import pytest
import torch
from conftest import SAMPLE_TEXT, load_script, tiny_config

from blockbert_hf import BlockBertForMaskedLM
from blockbert_hf.saving import save_atomically
from blockbert_hf.tokenization import match_tokenizer_to_config


diagnostic = load_script("experiments/block_diagnostic.py")


def _model(tokenizer, **overrides) -> BlockBertForMaskedLM:
    # A wide initialisation, so that what attention carries across blocks moves the logits well above rounding.
    config = tiny_config(vocab_size=len(tokenizer), initializer_range=0.3, **overrides)
    match_tokenizer_to_config(tokenizer, config)
    return BlockBertForMaskedLM(config).eval()


@pytest.fixture(scope="module")
def sequences(tokenizer):
    return diagnostic.full_sequences([str(SAMPLE_TEXT)], tokenizer, 64, "heading", limit=24)


def test_only_heads_that_read_block_0_make_a_difference(tokenizer, sequences):
    assert len(sequences) == 24 and all(len(ids) == 64 for ids in sequences["input_ids"])
    blind = diagnostic.block_context_diagnostic(_model(tokenizer, heads_per_shift=[4, 0]), tokenizer, sequences)
    reading = diagnostic.block_context_diagnostic(_model(tokenizer, heads_per_shift=[3, 1]), tokenizer, sequences)
    full = diagnostic.block_context_diagnostic(
        _model(tokenizer, attention_pattern="full", num_blocks=1), tokenizer, sequences, block_size=32
    )
    assert blind["block_size"] == reading["block_size"] == full["block_size"] == 32
    assert blind["masked_tokens"] == reading["masked_tokens"] > 24 * 32 * 0.1  # block 1's masks only
    assert abs(blind["difference"]) < 1e-6
    for result in (reading, full):
        assert abs(result["difference"]) > 1e-3 and result["difference_standard_error"] > 0
    assert len(set(sequences["document"])) == 7 and blind["same_document_pairs"] == 0  # 24 spread over 7 articles


def test_block_0_comes_from_another_document_where_there_is_one():
    assert diagnostic.partners([0, 0, 1, 1]) == [2, 3, 0, 1]
    assert diagnostic.partners([0, 0, 0, 1]) == [3, 3, 3, 1]
    assert diagnostic.partners([5, 5, 5]) == [1, 2, 0]


def test_the_script_scores_a_saved_model(tokenizer, tmp_path, capsys):
    model = _model(tokenizer, heads_per_shift=[4, 0])
    save_atomically(tmp_path / "model", model.save_pretrained, tokenizer.save_pretrained)
    argv = ["--model_path", str(tmp_path / "model"), "--validation_files", str(SAMPLE_TEXT)]
    argv += ["--document_boundary", "heading", "--max_sequences", "6", "--output_file", str(tmp_path / "out.json")]
    assert diagnostic.main(argv) == 0
    result = json.loads((tmp_path / "out.json").read_text())
    assert result["sequences"] == 6 and abs(result["difference"]) < 1e-6
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == result
    with pytest.raises(ValueError, match="two blocks of b = 40"):
        diagnostic.block_context_diagnostic(
            model, tokenizer, diagnostic.full_sequences([str(SAMPLE_TEXT)], tokenizer, 64, limit=4), 40
        )
    assert torch.is_grad_enabled()
