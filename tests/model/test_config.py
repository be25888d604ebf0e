import pytest
from conftest import tiny_config
from transformers import AutoConfig

from blockbert_hf import BlockBertConfig, default_heads_per_shift, parse_heads_per_shift


def test_defaults_follow_spec():
    config = BlockBertConfig()
    assert config.max_sequence_length == 512
    assert (config.num_blocks, config.block_size, config.heads_per_shift) == (2, 256, [10, 2])
    assert config.attention_pattern == "blockwise"
    assert (config.sparse_stride, config.sparse_expressivity) == (128, 32)
    assert config.position_embedding_style == "roberta"


def test_three_blocks_at_512_pads_to_171():
    config = BlockBertConfig(num_blocks=3)
    assert config.block_size == 171 and config.heads_per_shift == [8, 2, 2]


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
    assert config.max_sequence_length == 512 and config.block_size == 171


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


def test_block_size_may_be_larger():
    assert BlockBertConfig(num_blocks=2, block_size=300).block_size == 300


def test_config_round_trip(tmp_path):
    config = tiny_config(num_blocks=3, heads_per_shift="2:1:1", attention_pattern="blockwise")
    config.save_pretrained(tmp_path)
    loaded = AutoConfig.from_pretrained(tmp_path)
    assert type(loaded) is BlockBertConfig
    for field in ("num_blocks", "block_size", "heads_per_shift", "attention_pattern", "position_embedding_style"):
        assert getattr(loaded, field) == getattr(config, field)


def test_fields_edited_after_construction_are_checked_when_building_a_model():
    from blockbert_hf import BlockBertModel

    config = tiny_config()
    config.num_blocks = 3  # heads_per_shift still has 2 entries
    with pytest.raises(ValueError, match="has 2 entries but num_blocks=3"):
        BlockBertModel(config)
