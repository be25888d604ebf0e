"""Block-relative positions (`block_relative_positions=True`, docs/attention.md, "Block-relative positions"): positions
restart at every block, `N = n * b` with `b <= C` (the position rows the table offers), every block with shift-0 heads
only is encoded as if it were its own input, and the rules of the block pattern hold unchanged."""

import json

import pytest
import torch
from attention_checks import assert_first_attention_equals_reference
from conftest import make_model, random_batch, tiny_config

from blockbert_hf import BlockBertConfig, BlockBertForQuestionAnswering, BlockBertModel
from blockbert_hf.conversion import extend_position_embeddings
from blockbert_hf.tokenization import match_tokenizer_to_config


# The tiny models: RoBERTa positions with 66 rows (pad 1, C = 64), or BERT positions with 64 rows (pad 0, C = 64).
STYLES = {
    "roberta": dict(),
    "bert": dict(position_embedding_style="bert", max_position_embeddings=64, pad_token_id=0, type_vocab_size=2),
}


def relative_config(style="roberta", **overrides) -> BlockBertConfig:
    return tiny_config(block_relative_positions=True, **{**STYLES[style], **overrides})


def expected_positions(config, lengths, seq_len) -> torch.Tensor:
    """The spec's formula: the real token at index t gets P + (t mod b); RoBERTa padding keeps pad_token_id, BERT
    positions ignore padding (index t gets t mod b, as index t gets t without the option)."""
    b = config.effective_block_size
    index = torch.arange(seq_len)
    if config.position_embedding_style == "bert":
        return (index % b).expand(len(lengths), seq_len)
    rows = [torch.where(index < length, config.pad_token_id + 1 + index % b, config.pad_token_id) for length in lengths]
    return torch.stack(rows)


# --- the config: N = n * b, b <= C ------------------------------------------------------------------------------------


@pytest.mark.parametrize("style", list(STYLES))
def test_n_is_num_blocks_times_block_size(style):
    config = relative_config(style)
    assert (config.position_rows, config.effective_block_size, config.max_sequence_length) == (64, 64, 128)
    config = relative_config(style, num_blocks=3, heads_per_shift=[2, 1, 1], block_size=20)
    assert (config.effective_block_size, config.max_sequence_length) == (20, 60)
    off = tiny_config(**STYLES[style])  # without the option N is bound by the table
    assert (off.max_sequence_length, off.effective_block_size, off.block_relative_positions) == (64, 32, False)


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(attention_pattern="full"), "attention_pattern='full' has no blocks: use attention_pattern='blockwise'"),
        (dict(attention_pattern="sparse_fixed", sparse_stride=16, sparse_expressivity=4), "'sparse_fixed' has no"),
        (dict(block_size=65), r"block_size=65 is more than the C = 64 positions .* use 1 <= block_size <= 64"),
        (dict(block_size=65, position_embedding_style="bert", max_position_embeddings=64), "C = 64 positions"),
    ],
)
def test_configuration_errors(fields, message):
    with pytest.raises(ValueError, match=message):
        tiny_config(block_relative_positions=True, **fields)


def test_errors_on_load_and_when_building_a_model(tmp_path):
    config = relative_config()
    config.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="has no blocks"):
        BlockBertConfig.from_pretrained(tmp_path, attention_pattern="full")
    with pytest.raises(ValueError, match="more than the C = 64"):
        BlockBertConfig.from_pretrained(tmp_path, block_size=80)
    config.block_size = 80  # edited after construction: caught when a model is built
    with pytest.raises(ValueError, match="more than the C = 64"):
        BlockBertModel(config)


def test_config_json_holds_the_option_and_configs_without_it_load_with_it_off(tmp_path):
    relative_config().save_pretrained(tmp_path / "on")
    assert json.loads((tmp_path / "on" / "config.json").read_text())["block_relative_positions"] is True
    assert BlockBertConfig.from_pretrained(tmp_path / "on").max_sequence_length == 128
    # Off is the default and is left out of config.json, which is then what it was before the option existed.
    tiny_config().save_pretrained(tmp_path / "off")
    saved = json.loads((tmp_path / "off" / "config.json").read_text())
    assert "block_relative_positions" not in saved
    assert BlockBertConfig.from_dict(saved).block_relative_positions is False
    assert BlockBertConfig.from_pretrained(tmp_path / "off").max_sequence_length == 64


def test_loading_with_another_num_blocks_changes_n(tmp_path, tokenizer):
    """A model saved with n = 2 (N = 128) read with n = 4 takes 4 * 64 tokens, and so does its tokenizer."""
    config = relative_config(vocab_size=len(tokenizer))
    BlockBertForQuestionAnswering(config).save_pretrained(tmp_path)
    model = BlockBertForQuestionAnswering.from_pretrained(tmp_path, num_blocks=4, heads_per_shift="1:1:1:1")
    assert (model.config.max_sequence_length, model.config.effective_block_size) == (256, 64)
    assert model.roberta.embeddings.position_embeddings.num_embeddings == 66  # no rows added
    assert match_tokenizer_to_config(tokenizer, model.config).model_max_length == 256
    input_ids, attention_mask = random_batch([256, 150], 256, vocab_size=len(tokenizer))
    with torch.no_grad():
        outputs = model.eval()(input_ids, attention_mask=attention_mask)
    assert outputs.start_logits.shape == (2, 256) and not outputs.start_logits.isnan().any()


def test_too_long_inputs_name_the_new_n():
    model = make_model(BlockBertModel, relative_config())
    with pytest.raises(ValueError, match=r"L = 129 tokens but this model takes at most N = 128 .*2 \* 64.*num_blocks"):
        model(torch.full((1, 129), 5))


# --- the positions ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("style", list(STYLES))
def test_positions_restart_at_every_block(style):
    """The position ids the embeddings make follow the formula, and the embeddings' output is the one those ids give
    when passed explicitly; `inputs_embeds` gets the positions of an unpadded input."""
    config = relative_config(style, num_blocks=3, heads_per_shift=[2, 1, 1], block_size=16)  # N = 48
    model = make_model(BlockBertModel, config)
    pad = config.pad_token_id
    lengths = [48, 37, 16, 5]
    input_ids, _ = random_batch(lengths, 48, pad_token_id=pad)
    expected = expected_positions(config, lengths, 48)
    if style == "roberta":
        assert expected[0, :18].tolist() == list(range(2, 18)) + [2, 3]
        assert expected[1, 35:].tolist() == [pad + 1 + 35 % 16, pad + 1 + 36 % 16] + [pad] * 11
    else:
        assert expected[0, :18].tolist() == list(range(16)) + [0, 1]
    embeddings = model.embeddings
    assert torch.equal(embeddings.block_relative_position_ids(input_ids, 48).expand(4, 48), expected)
    with torch.no_grad():
        torch.testing.assert_close(embeddings(input_ids), embeddings(input_ids, position_ids=expected), atol=0, rtol=0)
        inputs_embeds = embeddings.word_embeddings(input_ids[:1])
        torch.testing.assert_close(
            embeddings(inputs_embeds=inputs_embeds),
            embeddings(inputs_embeds=inputs_embeds, position_ids=expected[:1]),
            atol=0,
            rtol=0,
        )


@pytest.mark.parametrize("style", list(STYLES))
def test_given_position_ids_are_used_as_they_are(style):
    """Passed position ids bypass the option: the model with it on computes what the same weights compute without it."""
    on = make_model(BlockBertModel, relative_config(style, block_size=32))  # N = 64, as without the option
    off = make_model(BlockBertModel, tiny_config(**STYLES[style]))
    off.load_state_dict(on.state_dict())
    pad = on.config.pad_token_id
    input_ids, attention_mask = random_batch([64, 40], 64, pad_token_id=pad)
    position_ids = (torch.arange(64) * 7 % 60 + (pad + 1 if style == "roberta" else 0)).expand(2, 64)
    with torch.no_grad():
        given = on(input_ids, attention_mask=attention_mask, position_ids=position_ids).last_hidden_state
        reference = off(input_ids, attention_mask=attention_mask, position_ids=position_ids).last_hidden_state
        own = on(input_ids, attention_mask=attention_mask).last_hidden_state
    torch.testing.assert_close(given, reference, atol=0, rtol=0)
    assert not torch.allclose(own[0, 32:], given[0, 32:], atol=1e-3)


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("style", list(STYLES))
def test_each_block_is_encoded_as_its_own_input(style, attn_implementation):
    """The point of the option: with every head on shift 0, each block of a long input (N = 128, twice what the
    position table covers) gives exactly what that block gives encoded alone, as an input the table was trained on."""
    config = relative_config(style, heads_per_shift=[4, 0])  # b = C = 64, N = 128
    model = make_model(BlockBertModel, config, attn_implementation)
    if style == "bert":
        with torch.no_grad():
            model.embeddings.token_type_embeddings.weight.normal_()
    pad = config.pad_token_id
    lengths = [128, 100]
    input_ids, attention_mask = random_batch(lengths, 128, pad_token_id=pad)
    token_type_ids = (torch.arange(128) % 3 == 0).long().expand(2, 128) * attention_mask if style == "bert" else None
    with torch.no_grad():
        whole = model(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).last_hidden_state
        for row, length in enumerate(lengths):
            for start in range(0, length, 64):
                block = slice(start, min(start + 64, length))
                types = None if token_type_ids is None else token_type_ids[row : row + 1, block]
                alone = model(input_ids[row : row + 1, block], token_type_ids=types).last_hidden_state[0]
                torch.testing.assert_close(whole[row, block], alone, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("style", list(STYLES))
def test_at_b_equal_to_c_positions_are_those_of_the_copied_rows(style):
    """At b = C the model reads the positions a table extended by repeating its rows gives (docs/conversion.md):
    a model with the option equals the same weights without it and with the table extended to N = 2C."""
    on = make_model(BlockBertModel, relative_config(style))  # N = 128
    pad = on.config.pad_token_id
    rows = on.config.max_position_embeddings + 64
    off = make_model(BlockBertModel, tiny_config(**{**STYLES[style], "max_position_embeddings": rows}))
    state = on.state_dict()
    name = "embeddings.position_embeddings.weight"
    state[name] = extend_position_embeddings(state[name], rows, style, pad)
    off.load_state_dict(state)
    input_ids, attention_mask = random_batch([128, 90], 128, pad_token_id=pad)
    with torch.no_grad():
        expected = off(input_ids, attention_mask=attention_mask).last_hidden_state
        actual = on(input_ids, attention_mask=attention_mask).last_hidden_state
    torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-5)


# --- the rules of the block pattern hold unchanged --------------------------------------------------------------------


@pytest.mark.parametrize("style", list(STYLES))
def test_padding_invariance_and_the_dense_reference(style):
    config = relative_config(style, num_blocks=3, heads_per_shift=[2, 1, 1], block_size=40)  # N = 120
    model = make_model(BlockBertModel, config, "eager")
    pad = config.pad_token_id
    generator = torch.Generator().manual_seed(1)
    lengths = [120, 81, 40, 17] + torch.randint(1, 121, (2,), generator=generator).tolist()
    input_ids, attention_mask = random_batch(lengths, 120, pad_token_id=pad, generator=generator)
    with torch.no_grad():
        to_n = model(input_ids, attention_mask=attention_mask).last_hidden_state
        longest = max(lengths[1:])
        shorter = model(input_ids[1:, :longest], attention_mask=attention_mask[1:, :longest]).last_hidden_state
        for i, n in enumerate(lengths):
            alone = model(input_ids[i : i + 1, :n]).last_hidden_state[0]
            torch.testing.assert_close(to_n[i, :n], alone, atol=1e-5, rtol=1e-5)
            if i > 0:
                torch.testing.assert_close(shorter[i - 1, :n], alone, atol=1e-5, rtol=1e-5)
    assert_first_attention_equals_reference(model, input_ids, attention_mask)


def test_one_block_is_the_plain_model():
    """With n = 1, b = C = N: the positions are the usual ones, so the model is the one without the option."""
    on = make_model(BlockBertModel, relative_config(num_blocks=1, heads_per_shift=[4]))
    off = make_model(BlockBertModel, tiny_config(num_blocks=1, heads_per_shift=[4]))
    off.load_state_dict(on.state_dict())
    assert on.config.max_sequence_length == off.config.max_sequence_length == 64
    input_ids, attention_mask = random_batch([64, 23], 64)
    with torch.no_grad():
        expected = off(input_ids, attention_mask=attention_mask).last_hidden_state
        torch.testing.assert_close(on(input_ids, attention_mask=attention_mask).last_hidden_state, expected)


def test_save_load_round_trip(tmp_path):
    model = make_model(BlockBertForQuestionAnswering, relative_config(num_blocks=3, heads_per_shift=[2, 1, 1]))
    input_ids, attention_mask = random_batch([192, 130], 192)
    with torch.no_grad():
        before = model(input_ids, attention_mask=attention_mask).start_logits
    model.save_pretrained(tmp_path)
    reloaded = BlockBertForQuestionAnswering.from_pretrained(tmp_path).eval()
    assert reloaded.config.block_relative_positions and reloaded.config.max_sequence_length == 192
    with torch.no_grad():
        after = reloaded(input_ids, attention_mask=attention_mask).start_logits
    torch.testing.assert_close(after, before, atol=0, rtol=0)
    assert reloaded.config.to_json_string() == model.config.to_json_string()
