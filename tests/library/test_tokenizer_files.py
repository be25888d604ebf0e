"""Which tokenizer `AutoTokenizer.from_pretrained` gives for a saved BlockBERT folder: the class its tokenizer files
name, RoBERTa's for a bare byte-level BPE vocabulary, and a clear error (never a special-tokens-only stand-in) for a
folder without tokenizer files; and a saved `tokenizer.json` that does not cut or pad what `tokenizers` reads."""

import json

import pytest
from conftest import tiny_config
from tokenizers import Tokenizer
from transformers import AutoTokenizer, RobertaTokenizer

from blockbert_hf import BlockBertForMaskedLM
from blockbert_hf.saving import save_tokenizer
from blockbert_hf.tokenization import match_tokenizer_to_config


TEXT = "The battleship reached the Naktong perimeter."


@pytest.fixture
def saved_model(tmp_path, tokenizer):
    """A folder holding a tiny BlockBERT and nothing of its tokenizer."""
    config = tiny_config(vocab_size=len(tokenizer))
    match_tokenizer_to_config(tokenizer, config)
    BlockBertForMaskedLM(config).save_pretrained(tmp_path)
    return tmp_path


def test_a_saved_tokenizer_loads_as_the_class_it_names(saved_model, tokenizer):
    tokenizer.save_pretrained(saved_model)
    loaded = AutoTokenizer.from_pretrained(saved_model)
    assert type(loaded) is RobertaTokenizer and loaded.model_max_length == 64
    assert loaded(TEXT).input_ids == tokenizer(TEXT).input_ids


@pytest.mark.parametrize("tokenizer_config", [False, True], ids=["vocabulary-only", "config-without-class"])
def test_a_vocabulary_without_a_named_class_loads_as_roberta(saved_model, tokenizer, tokenizer_config):
    tokenizer.backend_tokenizer.model.save(str(saved_model))  # vocab.json + merges.txt
    if tokenizer_config:
        (saved_model / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 64}))
    loaded = AutoTokenizer.from_pretrained(saved_model)
    # A plain RobertaTokenizer: what it saves names a transformers class and loads without this package.
    assert type(loaded) is RobertaTokenizer
    assert loaded(TEXT).input_ids == tokenizer(TEXT).input_ids
    assert loaded.get_vocab() == tokenizer.get_vocab()


def test_a_folder_without_tokenizer_files_is_refused_naming_them(saved_model):
    with pytest.raises(OSError, match="has no tokenizer files") as caught:
        AutoTokenizer.from_pretrained(saved_model)
    message = str(caught.value)
    for wanted in (str(saved_model), "tokenizer.json", "vocab.json", "merges.txt", "match_tokenizer_to_config"):
        assert wanted in message


def test_half_a_vocabulary_is_refused_naming_the_missing_file(saved_model, tokenizer):
    tokenizer.backend_tokenizer.model.save(str(saved_model))
    (saved_model / "merges.txt").unlink()
    with pytest.raises(OSError, match="merges.txt"):
        AutoTokenizer.from_pretrained(saved_model)


def test_a_saved_tokenizer_json_keeps_no_truncation_or_padding_of_a_call(tmp_path, tokenizer):
    # transformers leaves a call's truncation and padding in the backend, which `save_pretrained` would write.
    tokenizer(TEXT, truncation=True, max_length=4, padding="max_length")
    save_tokenizer(tokenizer, tmp_path)
    saved = json.loads((tmp_path / "tokenizer.json").read_text())
    assert saved["truncation"] is None and saved["padding"] is None
    read_alone = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))  # as a runtime without transformers reads it
    assert read_alone.encode(TEXT).ids == tokenizer(TEXT).input_ids
    assert len(read_alone.encode(TEXT).ids) > 4
