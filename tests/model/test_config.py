"""The configuration: defaults and errors of docs/attention.md's config fields, the paper's head notation, round trips,
and the block size (derived from the current N and n unless set; `config.json` holds it as set)."""

import json

import pytest
import transformers
from conftest import tiny_config
from huggingface_hub.errors import StrictDataclassFieldValidationError
from transformers import AutoConfig

from blockbert_hf import BlockBertConfig, BlockBertModel, default_heads_per_shift, parse_heads_per_shift


def test_defaults_follow_spec():
    config = BlockBertConfig()
    assert config.max_sequence_length == 512
    assert (config.num_blocks, config.block_size, config.heads_per_shift) == (2, None, [10, 2])
    assert config.effective_block_size == 256
    assert config.attention_pattern == "blockwise"
    assert (config.sparse_stride, config.sparse_expressivity) == (128, 32)
    assert config.position_embedding_style == "roberta"


def test_the_defaults_that_differ_from_roberta_config_are_named_in_the_docstring():
    """`BlockBertConfig()` takes roberta-base's values where `RobertaConfig()` does not; the docstring names each field
    with both defaults."""
    from transformers import RobertaConfig

    ours, roberta = BlockBertConfig(), RobertaConfig()
    shared = set(RobertaConfig.__dataclass_fields__) & set(BlockBertConfig.__dataclass_fields__)
    differing = {
        name for name in shared if not name.startswith("_") and getattr(ours, name) != getattr(roberta, name)
    } - {"model_type"}
    assert differing == {"max_position_embeddings", "layer_norm_eps", "type_vocab_size"}
    docstring = " ".join(BlockBertConfig.__doc__.split())
    for name in differing:
        assert f"`{name}={getattr(ours, name)}`" in docstring
    defaults = (roberta.max_position_embeddings, roberta.layer_norm_eps, roberta.type_vocab_size)
    assert "defaults to `{}` (N = 510) and to BERT's `{}` and `{}`".format(*defaults) in docstring


def test_three_blocks_at_512_pads_to_171():
    config = BlockBertConfig(num_blocks=3)
    assert config.effective_block_size == 171 and config.heads_per_shift == [8, 2, 2]


def test_default_head_split_rule():
    assert default_heads_per_shift(12, 1) == [12]
    assert default_heads_per_shift(8, 4) == [5, 1, 1, 1]
    assert default_heads_per_shift(16, 3) == [12, 2, 2]
    with pytest.raises(ValueError, match="no head with shift 0"):
        default_heads_per_shift(4, 5)
    with pytest.raises(ValueError, match="no head with shift 0"):
        BlockBertConfig(num_attention_heads=4, hidden_size=32, num_blocks=5)


def test_paper_notation():
    assert parse_heads_per_shift("10:2") == [10, 2]
    assert parse_heads_per_shift("8:2:2") == [8, 2, 2]
    assert BlockBertConfig(num_blocks=3, heads_per_shift="8:2:2").heads_per_shift == [8, 2, 2]
    config = BlockBertConfig(num_blocks=2, heads_per_shift="10:2")
    assert config.head_shifts == [0] * 10 + [1] * 2


def test_bert_positions_give_n_equal_to_max_positions():
    config = BlockBertConfig(position_embedding_style="bert", max_position_embeddings=512, num_blocks=3)
    assert config.max_sequence_length == 512 and config.effective_block_size == 171


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(num_blocks=2, heads_per_shift=[12]), "has 1 entries but num_blocks=2"),
        (dict(num_blocks=2, heads_per_shift=[10, 1]), "sums to 11 but num_attention_heads=12"),
        (dict(num_blocks=2, heads_per_shift=[13, -1]), "negative head count"),
        (dict(num_blocks=0), "num_blocks must be >= 1"),
        (dict(num_blocks=2, block_size=255), "smaller than the sequence length N = 512"),
        (dict(attention_pattern="local"), "attention_pattern='local' is unknown"),
        (dict(heads_per_shift="10/2"), "paper's notation"),
        (dict(position_embedding_style="t5"), "position_embedding_style='t5' is unknown"),
        (dict(sparse_stride=16, sparse_expressivity=32), "sparse_expressivity"),
        (dict(hidden_size=100), "multiple of num_attention_heads"),
    ],
)
def test_configuration_errors(fields, message):
    with pytest.raises(ValueError, match=message):
        BlockBertConfig(**fields)


def test_config_fields_of_the_wrong_type_name_the_field():
    with pytest.raises(StrictDataclassFieldValidationError, match="num_blocks"):
        BlockBertConfig(num_blocks="2")
    with pytest.raises(StrictDataclassFieldValidationError, match="block_size"):
        BlockBertConfig(block_size=3.5)


def test_fields_edited_after_construction_are_checked_when_building_a_model():
    config = tiny_config()
    config.num_blocks = 3  # heads_per_shift still has 2 entries
    with pytest.raises(ValueError, match="has 2 entries but num_blocks=3"):
        BlockBertModel(config)


def test_config_round_trips_through_json_and_from_dict(tmp_path):
    config = tiny_config(num_blocks=3, heads_per_shift="2:1:1", attention_pattern="blockwise", num_labels=5)
    config.save_pretrained(tmp_path)
    assert type(AutoConfig.from_pretrained(tmp_path)) is BlockBertConfig
    reloaded = BlockBertConfig.from_pretrained(tmp_path)
    assert reloaded.to_dict() == config.to_dict()
    assert BlockBertConfig.from_dict(config.to_dict()).to_dict() == config.to_dict()
    assert BlockBertConfig.from_json_file(tmp_path / "config.json").heads_per_shift == [2, 1, 1]
    assert reloaded.num_labels == 5 and reloaded.effective_block_size == 22


# --- the block size: derived from the current N and n unless the user set it ------------------------------------------


# What `tiny_config(block_size=...).save_pretrained(folder)` writes, byte for byte: BLOCK_SIZE is the field as set
# (and, when set, that the user set it).
TINY_CONFIG_JSON = """{
  "attention_pattern": "blockwise",
  "attention_probs_dropout_prob": 0.0,
  "auto_map": {
    "AutoConfig": "configuration_blockbert.BlockBertConfig"
  },
  "block_size": BLOCK_SIZE,
  "bos_token_id": 0,
  "classifier_dropout": null,
  "eos_token_id": 2,
  "heads_per_shift": [
    3,
    1
  ],
  "hidden_act": "gelu",
  "hidden_dropout_prob": 0.0,
  "hidden_size": 32,
  "initializer_range": 0.02,
  "intermediate_size": 64,
  "layer_norm_eps": 1e-05,
  "max_position_embeddings": 66,
  "model_type": "blockbert",
  "num_attention_heads": 4,
  "num_blocks": 2,
  "num_hidden_layers": 2,
  "pad_token_id": 1,
  "position_embedding_style": "roberta",
  "sparse_expressivity": 32,
  "sparse_prediction": false,
  "sparse_stride": 128,
  "tie_word_embeddings": true,
  "transformers_version": "VERSION",
  "type_vocab_size": 1,
  "vocab_size": 120
}
"""


@pytest.mark.parametrize("block_size, saved", [(None, "null"), (40, '40,\n  "block_size_set_by_user": true')])
def test_config_json_holds_the_block_size_as_set(block_size, saved, tmp_path):
    config = tiny_config(block_size=block_size)
    assert config.block_size == block_size and config.to_dict()["block_size"] == block_size
    config.save_pretrained(tmp_path)
    expected = TINY_CONFIG_JSON.replace("BLOCK_SIZE", saved).replace("VERSION", transformers.__version__)
    assert (tmp_path / "config.json").read_bytes() == expected.encode()


def test_an_unset_block_size_follows_num_blocks_and_n(tmp_path):
    config = tiny_config()
    assert (config.block_size, config.effective_block_size) == (None, 32)
    config.num_blocks, config.heads_per_shift = 4, [1, 1, 1, 1]
    assert config.effective_block_size == 16
    config.max_position_embeddings = 130  # N = 128
    assert config.effective_block_size == 32
    config.pad_token_id = 0  # RoBERTa positions: N = max_position_embeddings - pad - 1 = 129
    assert config.effective_block_size == 33
    assert config.block_size is None and "effective_block_size" not in config.to_dict()
    BlockBertModel(config).save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["block_size"] is None
    assert BlockBertConfig.from_pretrained(tmp_path).effective_block_size == 33


def test_a_block_size_set_by_the_user_is_kept_and_validated(tmp_path):
    config = tiny_config(block_size=40)
    assert (config.block_size, config.effective_block_size) == (40, 40)
    config.num_blocks, config.heads_per_shift = 1, [4]  # 1 * 40 < N = 64: caught when used, not on assignment
    with pytest.raises(ValueError, match="block_size >= 64"):
        BlockBertModel(config)
    with pytest.raises(ValueError, match="block_size >= 64"):
        config.save_pretrained(tmp_path / "config")
    config.num_blocks, config.heads_per_shift = 2, [3, 1]
    BlockBertModel(config).save_pretrained(tmp_path / "model")
    assert json.loads((tmp_path / "model" / "config.json").read_text())["block_size"] == 40
    with pytest.raises(ValueError, match="block_size >= 64"):
        BlockBertConfig.from_pretrained(tmp_path / "model", num_blocks=1, heads_per_shift=[4])


def test_block_size_may_be_larger():
    assert BlockBertConfig(num_blocks=2, block_size=300).effective_block_size == 300


@pytest.mark.parametrize(
    "fields",
    [
        dict(block_size=32),  # ceil(N / n): what a folder saved before the field could stay unset stores
        dict(block_size=64, block_relative_positions=True),  # C, the position rows
    ],
)
def test_a_block_size_set_to_its_derived_value_survives_save_and_load(fields, tmp_path):
    config = tiny_config(**fields)
    config.save_pretrained(tmp_path)
    reloaded = BlockBertConfig.from_pretrained(tmp_path)
    assert reloaded.block_size == fields["block_size"] and reloaded.to_dict() == config.to_dict()
    # Kept when the number of blocks changes on load, as a block size set by the user is.
    overridden = BlockBertConfig.from_pretrained(tmp_path, num_blocks=3, heads_per_shift=[2, 1, 1])
    assert overridden.effective_block_size == fields["block_size"]
    unset = tiny_config(**{**fields, "block_size": None})
    assert BlockBertConfig.from_dict(unset.to_dict()).block_size is None


@pytest.mark.parametrize(
    "fields, dead_shifts",
    [
        (dict(block_size=64), "1"),  # b = N: every token in block 0
        (dict(block_size=100), "1"),
        (dict(num_blocks=4, block_size=32, heads_per_shift=[1, 1, 1, 1]), "2"),  # blocks 0 and 1 of 4 hold tokens
    ],
)
def test_a_block_size_that_leaves_heads_no_tokens_to_read_is_refused(fields, dead_shifts, tmp_path):
    with pytest.raises(ValueError, match=rf"shift\(s\) {dead_shifts} .* always output zero"):
        tiny_config(**fields)
    tiny_config(block_size=32).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="always output zero"):  # also when the number of blocks changes on load
        BlockBertConfig.from_pretrained(tmp_path, num_blocks=4, heads_per_shift=[1, 1, 1, 1])
    # Shifts without heads may read nothing, and short inputs still may: only heads that never can are refused.
    assert tiny_config(block_size=64, heads_per_shift=[4, 0]).effective_block_size == 64
    assert tiny_config(num_blocks=4, block_size=32, heads_per_shift=[2, 1, 0, 1]).effective_block_size == 32


def test_roberta_positions_need_a_pad_token_id():
    with pytest.raises(ValueError, match="pad_token_id=None.*position_embedding_style='roberta'"):
        tiny_config(pad_token_id=None)
    assert tiny_config(pad_token_id=None, position_embedding_style="bert").max_sequence_length == 66


@pytest.mark.parametrize("notation", ["--10:2", "\u00b2:2", "1\u0660:2", "+10:2", "10:2:", ""])
def test_heads_per_shift_outside_the_paper_notation_gets_the_notation_message(notation):
    with pytest.raises(ValueError, match="paper's notation"):
        BlockBertConfig(heads_per_shift=notation)
