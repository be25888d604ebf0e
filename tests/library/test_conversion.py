"""RoBERTa/BERT -> BlockBERT conversion: weight for weight, n = 1 equality, position extension, BERT specifics,
headless sources, the checkpoint's own tokenizer for verification, bad inputs that write nothing."""

import json

import huggingface_hub
import pytest
import torch
from conftest import SAMPLE_TEXT, load_script
from huggingface_hub import ModelCard
from tokenizers import BertWordPieceTokenizer
from transformers import (
    AutoModelForMaskedLM,
    AutoTokenizer,
    BertConfig,
    BertForMaskedLM,
    BertForPreTraining,
    BertModel,
    BertTokenizer,
    DistilBertConfig,
    DistilBertModel,
    RobertaConfig,
    RobertaForMaskedLM,
    RobertaModel,
)

from blockbert_hf import BlockBertForMaskedLM, BlockBertModel
from blockbert_hf.conversion import (
    ConversionError,
    TokenizerError,
    convert_checkpoint,
    extend_position_embeddings,
    map_source_key,
    sample_sentences,
    verify_conversion,
)
from blockbert_hf.tokenization import read_text_lines
from blockbert_hf.train.model_card import lineage_base_model


TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)
SENTENCES = sample_sentences(SAMPLE_TEXT, 4)


@pytest.fixture(scope="module")
def bert_tokenizer_folder(tmp_path_factory):
    """A lower-cased WordPiece tokenizer trained on the bundled sample ([PAD] = 0, as in BERT)."""
    folder = tmp_path_factory.mktemp("bert-tokenizer")
    wordpiece = BertWordPieceTokenizer(lowercase=True)
    wordpiece.train_from_iterator(
        read_text_lines(SAMPLE_TEXT),
        vocab_size=600,
        min_frequency=2,
        special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
        show_progress=False,
    )
    wordpiece.save_model(str(folder))
    BertTokenizer(vocab=str(folder / "vocab.txt"), model_max_length=64).save_pretrained(folder)
    return folder


def _save(model, tokenizer, folder):
    model.eval().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


@pytest.fixture
def roberta_mlm(tmp_path, tokenizer):
    config = RobertaConfig(vocab_size=len(tokenizer), max_position_embeddings=66, pad_token_id=1, **TINY)
    return _save(RobertaForMaskedLM(config), tokenizer, tmp_path / "roberta-mlm")


def _bert(model_class, folder, tokenizer_folder, **overrides):
    tokenizer = BertTokenizer.from_pretrained(tokenizer_folder)
    fields = dict(
        vocab_size=len(tokenizer),
        max_position_embeddings=64,
        type_vocab_size=2,
        pad_token_id=0,
        layer_norm_eps=1e-12,
        **TINY,
    )
    fields.update(overrides)
    return _save(model_class(BertConfig(**fields)), tokenizer, folder)


def _n1_check(checks):
    return next(check for check in checks if check.name == "n=1 vs source")


def test_roberta_mlm_converts_weight_for_weight_and_n1_logits_are_equal(roberta_mlm, tmp_path):
    converted = convert_checkpoint(roberta_mlm, num_blocks=2, heads_per_shift="3:1")
    assert type(converted.model) is BlockBertForMaskedLM
    config = converted.config
    assert (config.num_blocks, config.effective_block_size, config.heads_per_shift) == (2, 32, [3, 1])
    assert config.position_embedding_style == "roberta" and config.max_sequence_length == 64
    # Every source tensor once: RobertaForMaskedLM's tensors (tied ones counted once) all copied, nothing extended.
    source_tensors = {id(t) for t in converted.source_model.state_dict(keep_vars=True).values()}
    assert len(converted.copied) == len(source_tensors) and not converted.extended and not converted.dropped
    checks = verify_conversion(converted, SENTENCES)
    assert _n1_check(checks).max_abs_diff < 1e-5
    assert max(_n1_check(checks).lengths) == 64  # the joined input reaches N
    assert all(check.passed for check in checks)
    # Inputs shorter than a block: the shift-1 head sees an empty block, so the outputs differ from RoBERTa's ...
    reported = next(check for check in checks if check.tolerance is None)
    assert reported.max_abs_diff > 1e-3
    # ... and equal the n = 1 model with that head silenced.
    silenced = next(check for check in checks if "silenced" in check.name)
    assert silenced.max_abs_diff < 1e-5 and max(silenced.lengths) == 32

    # The n = 1 conversion is the RoBERTa model itself, also through the saved folder.
    example = load_script("examples/convert_roberta_to_blockbert.py")
    assert example.main([roberta_mlm, str(tmp_path / "out"), "--num_blocks", "1"]) == 0
    loaded = AutoModelForMaskedLM.from_pretrained(tmp_path / "out").eval()
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "out")
    assert type(loaded) is BlockBertForMaskedLM and tokenizer.model_max_length == 64
    source = RobertaForMaskedLM.from_pretrained(roberta_mlm).eval()
    batch = tokenizer(SENTENCES, padding=True, truncation=True, return_tensors="pt")
    with torch.no_grad():
        diff = (loaded(**batch).logits - source(**batch).logits)[batch["attention_mask"].bool()].abs().max()
    assert diff < 1e-5
    report = json.loads((tmp_path / "out" / "conversion_report.json").read_text())
    assert report["verification"][0]["passed"] and report["num_blocks"] == 1
    assert (tmp_path / "out" / "modeling_blockbert.py").exists()
    # Verification called the tokenizer with truncation and padding; the saved tokenizer.json keeps neither.
    saved_tokenizer = json.loads((tmp_path / "out" / "tokenizer.json").read_text())
    assert saved_tokenizer["truncation"] is None and saved_tokenizer["padding"] is None


def test_bert_mlm_converts_with_bert_positions_token_types_and_head(tmp_path, bert_tokenizer_folder):
    source = _bert(
        BertForMaskedLM, tmp_path / "bert-mlm", bert_tokenizer_folder, layer_norm_eps=1e-7, hidden_act="gelu"
    )
    converted = convert_checkpoint(source, num_blocks=2, heads_per_shift=[3, 1], max_seq_length=128)
    config = converted.config
    assert type(converted.model) is BlockBertForMaskedLM
    assert config.position_embedding_style == "bert" and config.type_vocab_size == 2 and config.pad_token_id == 0
    assert config.layer_norm_eps == 1e-7 and config.max_position_embeddings == 128
    head = converted.model.lm_head
    bert_head = converted.source_model.cls.predictions
    torch.testing.assert_close(head.dense.weight, bert_head.transform.dense.weight)
    torch.testing.assert_close(head.layer_norm.weight, bert_head.transform.LayerNorm.weight)
    torch.testing.assert_close(head.bias, bert_head.bias)
    assert head.decoder.weight.data_ptr() == converted.model.roberta.embeddings.word_embeddings.weight.data_ptr()
    checks = verify_conversion(converted, SENTENCES)
    assert _n1_check(checks).max_abs_diff < 1e-5 and all(check.passed for check in checks)

    # Token types reach the model: a pair encodes differently from the same text as one segment.
    tokenizer = converted.tokenizer
    pair = tokenizer("the battle", "the war", return_tensors="pt")
    assert pair["token_type_ids"].max() == 1
    with torch.no_grad():
        with_types = converted.model(**pair).logits
        without = converted.model(pair["input_ids"], attention_mask=pair["attention_mask"]).logits
    assert (with_types - without).abs().max() > 1e-4


def test_bert_mlm_with_another_activation_converts_its_encoder_only(tmp_path, bert_tokenizer_folder):
    """BlockBERT's MLM head applies GELU: a relu BERT head is refused, and the encoder-only conversion that the error
    names works."""
    source = _bert(BertForMaskedLM, tmp_path / "bert-relu", bert_tokenizer_folder, hidden_act="relu")
    with pytest.raises(ConversionError, match="--target_class BlockBertModel --drop_source_keys cls."):
        convert_checkpoint(source, heads_per_shift="3:1")
    converted = convert_checkpoint(
        source, heads_per_shift="3:1", target_class="BlockBertModel", drop_source_keys=["cls."]
    )
    assert type(converted.model) is BlockBertModel and converted.config.hidden_act == "relu"
    assert converted.dropped and all(key.startswith("cls.predictions.") for key in converted.dropped)
    assert all(check.passed for check in verify_conversion(converted, SENTENCES))


def test_bert_base_model_carries_activation_and_pooler(tmp_path, bert_tokenizer_folder):
    source = _bert(BertModel, tmp_path / "bert", bert_tokenizer_folder, hidden_act="relu", layer_norm_eps=1e-6)
    converted = convert_checkpoint(source, num_blocks=1)
    assert type(converted.model) is BlockBertModel and converted.model.pooler is not None
    assert converted.config.hidden_act == "relu" and converted.config.layer_norm_eps == 1e-6
    check = _n1_check(verify_conversion(converted, SENTENCES))
    assert check.max_abs_diff < 1e-5 and check.passed


@pytest.mark.parametrize("style", ["roberta", "bert"])
def test_position_extension_repeats_the_trained_rows(style, tmp_path, tokenizer, bert_tokenizer_folder):
    if style == "roberta":
        config = RobertaConfig(vocab_size=len(tokenizer), max_position_embeddings=66, pad_token_id=1, **TINY)
        source = _save(RobertaModel(config), tokenizer, tmp_path / "src")
    else:
        source = _bert(BertModel, tmp_path / "src", bert_tokenizer_folder)
    converted = convert_checkpoint(source, num_blocks=2, heads_per_shift="3:1", max_seq_length=150)
    old = converted.source_model.embeddings.position_embeddings.weight
    new = converted.model.embeddings.position_embeddings.weight
    reserved = 2 if style == "roberta" else 0  # RoBERTa keeps rows 0 and 1 (pad = 1) and repeats rows 2..65
    assert new.shape[0] == 150 + reserved and converted.config.max_sequence_length == 150
    torch.testing.assert_close(new[:reserved], old[:reserved], rtol=0, atol=0)
    for row in range(150):
        torch.testing.assert_close(new[reserved + row], old[reserved + row % 64], rtol=0, atol=0)
    assert converted.extended == {"embeddings.position_embeddings.weight": ([64 + reserved, 32], [150 + reserved, 32])}
    checks = verify_conversion(converted, SENTENCES)
    assert all(check.passed for check in checks)
    # The extended model runs on an input of the full new length.
    input_ids = torch.randint(5, 500, (1, 150))
    with torch.no_grad():
        assert torch.isfinite(converted.model(input_ids).last_hidden_state).all()


def test_extend_position_embeddings_rule():
    rows = torch.arange(6.0)[:, None].expand(6, 2)  # RoBERTa-style, pad 1: rows 0, 1 reserved, 4 trained rows
    extended = extend_position_embeddings(rows, 12, "roberta", pad_token_id=1)
    assert extended[:, 0].tolist() == [0, 1, 2, 3, 4, 5, 2, 3, 4, 5, 2, 3]
    assert extend_position_embeddings(rows, 9, "bert", pad_token_id=0)[:, 0].tolist() == [0, 1, 2, 3, 4, 5, 0, 1, 2]


def test_map_source_key_names():
    assert map_source_key("bert.encoder.layer.0.attention.self.query.weight", "bert", True) == (
        "base",
        "encoder.layer.0.attention.self.query.weight",
    )
    assert map_source_key("cls.predictions.transform.LayerNorm.weight", "bert", True) == (
        "lm_head",
        "layer_norm.weight",
    )
    assert map_source_key("cls.predictions.bias", "bert", True) == ("lm_head", "bias")
    assert map_source_key("cls.seq_relationship.weight", "bert", True) is None
    assert map_source_key("lm_head.dense.bias", "roberta", True) == ("lm_head", "dense.bias")
    assert map_source_key("pooler.dense.weight", "bert", False) == ("base", "pooler.dense.weight")


def test_bert_for_pretraining_needs_the_nsp_head_and_pooler_dropped_explicitly(tmp_path, bert_tokenizer_folder):
    source = _bert(BertForPreTraining, tmp_path / "bert-pt", bert_tokenizer_folder)
    with pytest.raises(ConversionError, match="cls.seq_relationship.weight") as error:
        convert_checkpoint(source, num_blocks=2, heads_per_shift="3:1")
    assert "bert.pooler.dense.weight" in str(error.value) and "--drop_source_keys" in str(error.value)
    # Dropping only the next-sentence head leaves the pooler: the hint gives the whole flag value, not just the rest.
    with pytest.raises(ConversionError, match="--drop_source_keys cls.seq_relationship. bert.pooler.dense. "):
        convert_checkpoint(source, num_blocks=2, heads_per_shift="3:1", drop_source_keys=["cls.seq_relationship."])
    converted = convert_checkpoint(
        source, num_blocks=2, heads_per_shift="3:1", drop_source_keys=["cls.seq_relationship.", "bert.pooler."]
    )
    assert sorted(converted.dropped) == [
        "bert.pooler.dense.bias",
        "bert.pooler.dense.weight",
        "cls.seq_relationship.bias",
        "cls.seq_relationship.weight",
    ]
    assert all(check.passed for check in verify_conversion(converted, SENTENCES))


def test_bert_for_pretraining_command_line(tmp_path, bert_tokenizer_folder, capsys):
    """The documented command for a BertForPreTraining checkpoint (12 heads, as in BERT-base)."""
    source = _bert(
        BertForPreTraining, tmp_path / "bert-pt", bert_tokenizer_folder, hidden_size=48, num_attention_heads=12
    )
    command = [source, tmp_path / "out", "--num_blocks", "2", "--heads_per_shift", "10:2", "--max_seq_length", "1024"]
    assert _run_example([*command, "--drop_source_keys", "cls.seq_relationship."]) == 2
    assert "pass --drop_source_keys cls.seq_relationship. bert.pooler.dense." in capsys.readouterr().err
    assert _run_example([*command, "--drop_source_keys", "cls.seq_relationship.", "bert.pooler."]) == 0
    report = json.loads((tmp_path / "out" / "conversion_report.json").read_text())
    assert report["sequence_length"] == 1024 and report["heads_per_shift"] == [10, 2]
    assert sorted(report["dropped"]) == [
        "bert.pooler.dense.bias",
        "bert.pooler.dense.weight",
        "cls.seq_relationship.bias",
        "cls.seq_relationship.weight",
    ]


def test_headless_source_to_masked_lm_initialises_the_head_and_says_so(tmp_path, bert_tokenizer_folder):
    source = _bert(BertModel, tmp_path / "bert", bert_tokenizer_folder)
    converted = convert_checkpoint(
        source, num_blocks=2, heads_per_shift="3:1", target_class="BlockBertForMaskedLM", drop_source_keys=["pooler."]
    )
    assert type(converted.model) is BlockBertForMaskedLM
    assert converted.initialised == [
        "lm_head.bias",
        "lm_head.decoder.bias",
        "lm_head.dense.bias",
        "lm_head.dense.weight",
        "lm_head.layer_norm.bias",
        "lm_head.layer_norm.weight",
    ]
    assert any("initialised" in note for note in converted.notes)
    # The encoder is still the source's: hidden states agree at n = 1.
    assert _n1_check(verify_conversion(converted, SENTENCES)).max_abs_diff < 1e-5


def _run_example(args):
    return load_script("examples/convert_roberta_to_blockbert.py").main([str(arg) for arg in args])


def test_the_conversion_report_shipped_in_the_model_folder_holds_no_local_path(roberta_mlm, tmp_path, capsys):
    """Like the model cards, conversion_report.json names local inputs by their base names (a Hub id as given); the
    printed report, for the user who ran it, keeps the paths."""
    tokenizer_folder = tmp_path / "its-tokenizer"
    AutoTokenizer.from_pretrained(roberta_mlm).save_pretrained(tokenizer_folder)
    output = tmp_path / "out"
    assert _run_example([roberta_mlm, output, "--heads_per_shift", "3:1", "--tokenizer_name", tokenizer_folder]) == 0
    assert f"source: {roberta_mlm} " in capsys.readouterr().out
    text = (output / "conversion_report.json").read_text()
    report = json.loads(text)
    assert (report["source"], report["tokenizer"]["source"]) == ("roberta-mlm", "its-tokenizer")
    assert str(tmp_path) not in text and str(tmp_path.resolve()) not in text


def test_the_converted_folder_has_a_card_with_source_pattern_verification_and_lineage(roberta_mlm, tmp_path):
    """The card names the source, the pattern and every verification check; its base_model is the Hub id that
    --base_model gives a local source (none without it), and a run starting from the folder carries it on."""
    named, unnamed = tmp_path / "named", tmp_path / "unnamed"
    assert _run_example([roberta_mlm, named, "--heads_per_shift", "3:1", "--base_model", "someone/roberta-tiny"]) == 0
    card = ModelCard.load(named / "README.md")
    report = json.loads((named / "conversion_report.json").read_text())
    assert card.data.base_model == "someone/roberta-tiny" and card.data.pipeline_tag == "fill-mask"
    assert "[someone/roberta-tiny](https://huggingface.co/someone/roberta-tiny) (RobertaForMaskedLM)" in card.text
    assert "| attention | blockwise |" in card.text and "| heads per shift | 3:1 |" in card.text
    for check in report["verification"]:
        assert f"| {check['check']} | {check['max_abs_diff']:.2e} |" in card.text
    assert lineage_base_model(str(named)) == "someone/roberta-tiny"
    assert _run_example([roberta_mlm, unnamed, "--heads_per_shift", "3:1", "--skip_verification"]) == 0
    card = ModelCard.load(unnamed / "README.md")
    assert card.data.base_model is None and "`roberta-mlm` (RobertaForMaskedLM)" in card.text  # never made up
    assert "Skipped (`--skip_verification`)" in card.text and str(tmp_path) not in card.text
    assert lineage_base_model(str(unnamed)) is None
    assert _run_example([roberta_mlm, tmp_path / "bad", "--base_model", "not an id"]) == 2


@pytest.mark.parametrize(
    "case",
    [
        "unknown_architecture",
        "shorter_n",
        "bad_heads",
        "missing_folder",
        "hub_offline",
        "leftover_keys",
        "missing_verification_text",
    ],
)
def test_bad_inputs_give_clear_errors_and_write_nothing(
    case, tmp_path, tokenizer, roberta_mlm, bert_tokenizer_folder, capsys, monkeypatch
):
    output = tmp_path / "converted"
    args = {
        "shorter_n": ([roberta_mlm, output, "--max_seq_length", "32"], "smaller than the source's sequence length"),
        "bad_heads": ([roberta_mlm, output, "--num_blocks", "2", "--heads_per_shift", "2:1"], "sums to 3"),
        "missing_folder": ([tmp_path / "nowhere", output], "does not exist"),
        "hub_offline": (["someone/no-such-model", output], "not a local folder"),
        "missing_verification_text": (
            [roberta_mlm, output, "--heads_per_shift", "3:1", "--verification_text", tmp_path / "no.txt"],
            "is not a file",
        ),
    }
    if case == "unknown_architecture":
        distil = DistilBertModel(DistilBertConfig(vocab_size=120, dim=32, n_layers=1, n_heads=4, hidden_dim=64))
        args[case] = ([_save(distil, tokenizer, tmp_path / "distil"), output], "Unknown architecture")
    if case == "leftover_keys":
        source = _bert(BertForPreTraining, tmp_path / "bert-pt", bert_tokenizer_folder)
        args[case] = ([source, output, "--heads_per_shift", "3:1"], "cls.seq_relationship.weight")
    if case == "hub_offline":  # conftest sets HF_HUB_OFFLINE after huggingface_hub has read it; do not wait on retries
        monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    argv, message = args[case]
    assert _run_example(argv) == 2
    assert message in capsys.readouterr().err
    assert not output.exists()
    assert not [path for path in tmp_path.iterdir() if path.name.startswith(".converted")]


def test_failed_verification_exits_nonzero_and_writes_nothing(roberta_mlm, tmp_path, monkeypatch, capsys):
    example = load_script("examples/convert_roberta_to_blockbert.py")
    convert = example.convert_checkpoint

    def convert_then_break_a_weight(*args, **kwargs):
        converted = convert(*args, **kwargs)
        with torch.no_grad():
            converted.model.roberta.encoder.layer[1].output.dense.weight[0, 0] += 0.1
        return converted

    monkeypatch.setattr(example, "convert_checkpoint", convert_then_break_a_weight)
    output = tmp_path / "converted"
    assert example.main([roberta_mlm, str(output), "--num_blocks", "1"]) == 1
    assert "FAIL" in capsys.readouterr().out
    assert not output.exists()


def test_existing_output_is_kept_without_overwrite(roberta_mlm, tmp_path):
    output = tmp_path / "converted"
    output.mkdir()
    (output / "keep.txt").write_text("mine")
    assert _run_example([roberta_mlm, output, "--skip_verification"]) == 2
    assert (output / "keep.txt").read_text() == "mine"
    assert (
        _run_example([roberta_mlm, output, "--skip_verification", "--overwrite_output_dir", "--heads_per_shift", "3:1"])
        == 0
    )
    assert not (output / "keep.txt").exists() and (output / "model.safetensors").exists()


def test_the_option_names_of_earlier_versions_still_work_with_a_note(roberta_mlm, tmp_path, capsys):
    output = tmp_path / "converted"
    output.mkdir()
    (output / "old.txt").write_text("replaced")
    tokenizer_folder = tmp_path / "its-tokenizer"
    AutoTokenizer.from_pretrained(roberta_mlm).save_pretrained(tokenizer_folder)
    old_names = ["--heads=3:1", "--tokenizer", tokenizer_folder, "--overwrite", "--skip_verification"]
    assert _run_example([roberta_mlm, output, *old_names]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note:")]
    assert notes == [
        "note: --heads is now --heads_per_shift; the old name still works for now.",
        "note: --tokenizer is now --tokenizer_name; the old name still works for now.",
        "note: --overwrite is now --overwrite_output_dir; the old name still works for now.",
    ]
    report = json.loads((output / "conversion_report.json").read_text())
    assert report["heads_per_shift"] == [3, 1] and report["tokenizer"]["source"] == tokenizer_folder.name
    assert not (output / "old.txt").exists()


def _files(folder):
    return {path.relative_to(folder): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


@pytest.mark.parametrize("where", ["source", "parent"])
def test_an_output_that_is_or_holds_the_source_is_refused_even_with_overwrite(where, roberta_mlm, tmp_path, capsys):
    source = tmp_path / "roberta-mlm"
    before = _files(tmp_path)
    output = source if where == "source" else tmp_path
    assert (
        _run_example([roberta_mlm, output, "--overwrite_output_dir", "--skip_verification", "--heads_per_shift", "3:1"])
        == 2
    )
    assert f"{'is' if where == 'source' else 'holds'} SOURCE" in capsys.readouterr().err
    assert _files(tmp_path) == before


@pytest.mark.parametrize(
    "options, message",
    [
        (
            ["--heads_per_shift", "abc"],
            "Invalid --heads_per_shift: heads_per_shift='abc' is not in the paper's notation",
        ),
        (["--num_blocks", "0"], "--num_blocks must be at least 1, got 0"),
    ],
)
def test_bad_options_exit_2_naming_the_option(options, message, roberta_mlm, tmp_path, capsys):
    assert _run_example([roberta_mlm, tmp_path / "converted", "--skip_verification", *options]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "converted").exists()


@pytest.mark.parametrize("where", ["under_a_file", "a_file"])
def test_an_output_that_cannot_be_written_exits_2_before_any_work(where, roberta_mlm, tmp_path, monkeypatch, capsys):
    example = load_script("examples/convert_roberta_to_blockbert.py")
    monkeypatch.setattr(example, "convert_checkpoint", lambda *args, **kwargs: pytest.fail("converted anyway"))
    (tmp_path / "notes.txt").write_text("mine")
    output = tmp_path / "notes.txt" / "converted" if where == "under_a_file" else tmp_path / "notes.txt"
    assert example.main([roberta_mlm, str(output), "--overwrite_output_dir"]) == 2
    assert ("cannot be written" if where == "under_a_file" else "is a file") in capsys.readouterr().err
    assert (tmp_path / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_source_without_tokenizer_files_is_refused_unless_its_tokenizer_is_passed(
    family, tmp_path, tokenizer, bert_tokenizer_folder, capsys
):
    """transformers builds a stand-in tokenizer (special tokens only) for a folder without tokenizer files; verifying
    with it would run on `[CLS] [UNK] ... [SEP]`. The script refuses it (exit 1, nothing written) until --tokenizer_name
    names the checkpoint's own tokenizer."""
    if family == "bert":
        tokenizer_folder = bert_tokenizer_folder
        config = BertConfig(vocab_size=len(BertTokenizer.from_pretrained(tokenizer_folder)), **TINY)
        BertForMaskedLM(config).save_pretrained(tmp_path / "weights-only")
    else:
        tokenizer_folder = tmp_path / "roberta-tokenizer"
        tokenizer.save_pretrained(tokenizer_folder)
        config = RobertaConfig(vocab_size=len(tokenizer), max_position_embeddings=66, pad_token_id=1, **TINY)
        RobertaForMaskedLM(config).save_pretrained(tmp_path / "weights-only")
    source, output = tmp_path / "weights-only", tmp_path / "converted"
    assert sorted(path.name for path in source.iterdir()) == ["config.json", "model.safetensors"]

    for extra in ([], ["--skip_verification"]):  # a stand-in would also be saved as the model's tokenizer
        assert _run_example([source, output, "--heads_per_shift", "3:1", *extra]) == 1
        error = capsys.readouterr().err
        assert "has no tokenizer vocabulary" in error and "--tokenizer_name PATH" in error
        assert not output.exists()
        assert not [path for path in tmp_path.iterdir() if path.name.startswith(".converted")]
    with pytest.raises(TokenizerError, match="special tokens"):
        convert_checkpoint(str(source), heads_per_shift="3:1")

    assert _run_example([source, output, "--heads_per_shift", "3:1", "--tokenizer_name", tokenizer_folder]) == 0
    printed = capsys.readouterr().out
    assert f"from {tokenizer_folder}" in printed and "verification text:" in printed
    report = json.loads((output / "conversion_report.json").read_text())
    assert report["tokenizer"]["source"] == tokenizer_folder.name
    assert report["verification_text"]["unknown_tokens"] <= 0.05 * report["verification_text"]["tokens"]
    assert all(check["passed"] for check in report["verification"])
    saved = AutoTokenizer.from_pretrained(output)
    assert saved.get_vocab() == AutoTokenizer.from_pretrained(tokenizer_folder).get_vocab()


def test_verification_refuses_text_its_tokenizer_leaves_unknown(tmp_path, bert_tokenizer_folder, capsys):
    """A tokenizer that turns the verification text into unknown tokens is not the checkpoint's own (or the text is
    in a language it does not cover): verifying on `[UNK]`s would prove nothing."""
    source = _bert(BertForMaskedLM, tmp_path / "bert-mlm", bert_tokenizer_folder)
    greek = ["Η μάχη του Μαραθώνα έγινε το 490 π.Χ. ανάμεσα στους Αθηναίους και τους Πέρσες."] * 3
    converted = convert_checkpoint(source, num_blocks=2, heads_per_shift="3:1")
    with pytest.raises(TokenizerError, match="unknown"):
        verify_conversion(converted, greek)
    text_file = tmp_path / "greek.txt"
    text_file.write_text("\n".join(greek) + "\n", encoding="utf-8")
    output = tmp_path / "converted"
    assert _run_example([source, output, "--heads_per_shift", "3:1", "--verification_text", text_file]) == 1
    error = capsys.readouterr().err
    assert "--verification_text" in error and "nothing was written" in error
    assert not output.exists()


# --- block-relative positions -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("style", ["roberta", "bert"])
def test_block_relative_positions_keep_the_position_table_and_give_n_equal_to_n_times_b(
    style, tmp_path, tokenizer, bert_tokenizer_folder
):
    """`block_relative_positions=True`: the source's position table is copied as it is (no rows added), b = the
    source's N unless --block_size is smaller, N = n * b; verification passes."""
    if style == "roberta":
        config = RobertaConfig(vocab_size=len(tokenizer), max_position_embeddings=66, pad_token_id=1, **TINY)
        source = _save(RobertaModel(config), tokenizer, tmp_path / "src")
    else:
        source = _bert(BertModel, tmp_path / "src", bert_tokenizer_folder)
    converted = convert_checkpoint(source, num_blocks=3, heads_per_shift="2:1:1", block_relative_positions=True)
    config = converted.config
    assert config.block_relative_positions and config.position_embedding_style == style
    assert (config.effective_block_size, config.max_sequence_length) == (64, 192)
    assert not converted.extended
    old = converted.source_model.embeddings.position_embeddings.weight
    torch.testing.assert_close(converted.model.embeddings.position_embeddings.weight, old, rtol=0, atol=0)
    assert converted.tokenizer.model_max_length == 192
    assert all(check.passed for check in verify_conversion(converted, SENTENCES))
    with torch.no_grad():
        assert torch.isfinite(converted.model(torch.randint(5, 500, (1, 192))).last_hidden_state).all()
    smaller = convert_checkpoint(
        source, num_blocks=2, heads_per_shift="3:1", block_size=40, block_relative_positions=True
    ).config
    assert (smaller.effective_block_size, smaller.max_sequence_length, smaller.max_position_embeddings) == (
        40,
        80,
        old.shape[0],
    )


def test_block_relative_positions_command_line(roberta_mlm, tmp_path, capsys):
    output = tmp_path / "out"
    args = [roberta_mlm, output, "--num_blocks", "4", "--heads_per_shift", "1:1:1:1", "--block_relative_positions"]
    assert _run_example(args) == 0
    assert "block-relative positions" in capsys.readouterr().out
    saved = json.loads((output / "config.json").read_text())
    assert saved["block_relative_positions"] is True and saved["max_position_embeddings"] == 66
    assert AutoTokenizer.from_pretrained(output).model_max_length == 256
    report = json.loads((output / "conversion_report.json").read_text())
    assert (report["sequence_length"], report["block_relative_positions"], report["extended"]) == (256, True, {})
    loaded = AutoModelForMaskedLM.from_pretrained(output).eval()
    assert loaded.config.max_sequence_length == 256
    with torch.no_grad():
        assert torch.isfinite(loaded(torch.randint(5, 500, (1, 256))).logits).all()


@pytest.mark.parametrize(
    "options, message",
    [
        (["--max_seq_length", "100"], "--max_seq_length 100 with --block_relative_positions: N is num_blocks"),
        (["--block_size", "65"], "Use 1 <= --block_size <= 64"),
        (["--attention_pattern", "full"], "attention_pattern='full' has no blocks"),
    ],
)
def test_block_relative_positions_refuse_options_that_do_not_fit(options, message, roberta_mlm, tmp_path, capsys):
    args = [roberta_mlm, tmp_path / "converted", "--skip_verification", "--block_relative_positions", *options]
    assert _run_example(args) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "converted").exists()
