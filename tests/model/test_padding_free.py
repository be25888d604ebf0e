"""Padding-free batches (docs/attention.md, "Padding-free batches"): a padded batch computed on its real tokens only
gives what the padded computation gives at every real token (every head, hidden states, gradients), runs its
projections on the real tokens and its attention on the tiles that hold one, and falls back to the padded computation
where it does not apply."""

import json

import pytest
import torch
from attention_checks import assert_first_attention_equals_reference
from conftest import make_model, random_batch, tiny_config

from blockbert_hf import (
    BlockBertConfig,
    BlockBertForMaskedLM,
    BlockBertForMultipleChoice,
    BlockBertForQuestionAnswering,
    BlockBertForSequenceClassification,
    BlockBertForTokenClassification,
    BlockBertModel,
    attention_blockbert,
)


# n = 4 blocks of 16 (N = 64): lengths that leave tiles of only padding, a last tile partly filled, a sequence within
# one block (every shifted head's partner empty) and one of a single token.
LENGTHS = [64, 37, 5, 20, 1, 48]
PATTERNS = {
    "n=4 shifts 0-3": dict(num_blocks=4, heads_per_shift=[1, 1, 1, 1]),
    "n=2 3:1": dict(num_blocks=2, heads_per_shift=[3, 1]),
    "n=3 block_size 24": dict(num_blocks=3, heads_per_shift=[2, 1, 1], block_size=24),
    "block-relative positions": dict(
        num_blocks=4, heads_per_shift=[2, 1, 1, 0], block_relative_positions=True, block_size=16
    ),
    "full": dict(attention_pattern="full"),
    "sparse_fixed": dict(attention_pattern="sparse_fixed", sparse_stride=16, sparse_expressivity=4),
}


def paired_models(model_class, attn_implementation, **overrides):
    """The same weights twice: computing padding (`padding_free=False`) and not (the default)."""
    padded = make_model(model_class, tiny_config(padding_free=False, **overrides), attn_implementation)
    packed = make_model(model_class, tiny_config(**overrides), attn_implementation)
    packed.load_state_dict(padded.state_dict())
    return padded, packed


def assert_equal_at_real_tokens(padded, packed, is_real):
    torch.testing.assert_close(packed[is_real], padded[is_real], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("pattern", PATTERNS)
def test_hidden_states_of_every_layer_equal_the_padded_computation(pattern, attn_implementation):
    padded, packed = paired_models(BlockBertModel, attn_implementation, **PATTERNS[pattern])
    input_ids, attention_mask = random_batch(LENGTHS, 64, generator=torch.Generator().manual_seed(0))
    is_real = attention_mask.bool()
    with torch.no_grad():
        expected = padded(input_ids, attention_mask=attention_mask, output_hidden_states=True)
        result = packed(input_ids, attention_mask=attention_mask, output_hidden_states=True)
    assert len(result.hidden_states) == len(expected.hidden_states)
    for padded_layer, packed_layer in zip(expected.hidden_states, result.hidden_states):
        assert packed_layer.shape == padded_layer.shape
        assert_equal_at_real_tokens(padded_layer, packed_layer, is_real)
    assert_equal_at_real_tokens(expected.last_hidden_state, result.last_hidden_state, is_real)
    assert result.last_hidden_state[~is_real].abs().max() == 0  # padding comes back as zero vectors
    torch.testing.assert_close(result.pooler_output, expected.pooler_output, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("pattern", ["n=4 shifts 0-3", "block-relative positions", "n=3 block_size 24"])
def test_the_first_attention_equals_the_dense_reference(pattern):
    """Through the padding-free path, the rule itself: empty partner tiles (never computed) still give zero."""
    model = make_model(BlockBertModel, tiny_config(**PATTERNS[pattern]), "sdpa")
    input_ids, attention_mask = random_batch(LENGTHS, 64, generator=torch.Generator().manual_seed(1))
    assert_first_attention_equals_reference(model, input_ids, attention_mask)


@pytest.mark.parametrize(
    "model_class, output_names",
    [
        (BlockBertForMaskedLM, ["logits"]),
        (BlockBertForQuestionAnswering, ["start_logits", "end_logits"]),
        (BlockBertForTokenClassification, ["logits"]),
        (BlockBertForSequenceClassification, ["logits"]),
    ],
)
def test_every_head_equals_the_padded_computation(model_class, output_names):
    padded, packed = paired_models(model_class, "sdpa", **PATTERNS["n=4 shifts 0-3"])
    input_ids, attention_mask = random_batch(LENGTHS, 64, generator=torch.Generator().manual_seed(2))
    is_real = attention_mask.bool()
    with torch.no_grad():
        expected = padded(input_ids, attention_mask=attention_mask)
        result = packed(input_ids, attention_mask=attention_mask)
    for name in output_names:
        if expected[name].shape[:2] == is_real.shape:
            assert_equal_at_real_tokens(expected[name], result[name], is_real)
        else:  # one output per sequence
            torch.testing.assert_close(result[name], expected[name], atol=1e-5, rtol=1e-5)


def test_multiple_choice_equals_the_padded_computation():
    padded, packed = paired_models(BlockBertForMultipleChoice, "sdpa", **PATTERNS["n=2 3:1"])
    input_ids, attention_mask = random_batch([50, 12, 64, 3, 30, 41], 64, generator=torch.Generator().manual_seed(3))
    input_ids, attention_mask = input_ids.view(2, 3, 64), attention_mask.view(2, 3, 64)
    with torch.no_grad():
        expected = padded(input_ids, attention_mask=attention_mask).logits
        result = packed(input_ids, attention_mask=attention_mask).logits
    torch.testing.assert_close(result, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("pattern", ["n=4 shifts 0-3", "full"])
def test_training_gradients_equal_the_padded_computation(pattern, attn_implementation):
    """The question-answering loss leaves padding out of its softmax, so it does not depend on what is computed there:
    the same loss and the same gradient for every weight."""
    padded, packed = paired_models(BlockBertForQuestionAnswering, attn_implementation, **PATTERNS[pattern])
    input_ids, attention_mask = random_batch(LENGTHS, 64, generator=torch.Generator().manual_seed(4))
    starts = torch.tensor([3, 10, 2, 19, 0, 47])
    losses = []
    for model in (padded, packed):
        model.train()
        loss = model(input_ids, attention_mask=attention_mask, start_positions=starts, end_positions=starts + 0).loss
        loss.backward()
        losses.append(loss.detach())
    torch.testing.assert_close(losses[1], losses[0], atol=1e-5, rtol=1e-5)
    packed_grads = dict(packed.named_parameters())
    for name, parameter in padded.named_parameters():
        if parameter.grad is None:
            assert packed_grads[name].grad is None, name
            continue
        torch.testing.assert_close(packed_grads[name].grad, parameter.grad, atol=1e-5, rtol=1e-4, msg=name)


def test_projections_run_on_real_tokens_and_attention_on_tiles_that_hold_one(monkeypatch):
    config = tiny_config(num_hidden_layers=1, **PATTERNS["n=4 shifts 0-3"])
    model = make_model(BlockBertModel, config, "eager")
    input_ids, attention_mask = random_batch([64, 5], 64)  # tiles: 4 + 1 hold a real token, 3 only padding
    projected, tiles = [], []
    model.encoder.layer[0].attention.self.query.register_forward_hook(
        lambda module, args, output: projected.append(args[0].shape[0])
    )
    original = attention_blockbert._attention_probabilities

    def recording(query, *args):
        tiles.append(query.shape[0])
        return original(query, *args)

    monkeypatch.setattr(attention_blockbert, "_attention_probabilities", recording)
    with torch.no_grad():
        model(input_ids, attention_mask=attention_mask)
    assert projected == [64 + 5]
    assert tiles == [5] * 4  # one kernel call per shift, each on the 5 tiles


def test_padding_free_false_computes_the_padded_batch():
    model = make_model(BlockBertModel, tiny_config(padding_free=False), "sdpa")
    input_ids, attention_mask = random_batch([64, 5], 64)
    shapes = []
    model.encoder.layer[0].attention.self.query.register_forward_hook(
        lambda module, args, output: shapes.append(tuple(args[0].shape[:2]))
    )
    with torch.no_grad():
        model(input_ids, attention_mask=attention_mask)
    assert shapes == [(2, 64)]


@pytest.mark.parametrize(
    "case",
    ["no padding", "attention weights asked for"],
)
def test_falls_back_to_the_padded_computation_where_it_does_not_apply(case):
    model = make_model(BlockBertModel, tiny_config(), "eager")
    lengths = [64, 64] if case == "no padding" else [64, 5]
    input_ids, attention_mask = random_batch(lengths, 64)
    shapes = []
    model.encoder.layer[0].attention.self.query.register_forward_hook(
        lambda module, args, output: shapes.append(tuple(args[0].shape[:2]))
    )
    with torch.no_grad():
        outputs = model(input_ids, attention_mask=attention_mask, output_attentions=case != "no padding")
    assert shapes == [(2, 64)]
    if case != "no padding":
        assert outputs.attentions[0].shape == (2, 4, 2, 32, 32)


def test_the_switch_is_saved_only_when_off(tmp_path):
    assert "padding_free" not in BlockBertConfig().to_dict()
    BlockBertConfig(padding_free=False).save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["padding_free"] is False
    assert BlockBertConfig.from_pretrained(tmp_path).padding_free is False


def loss_and_gradients(model, **batch):
    model.zero_grad()
    loss = model(**batch).loss
    loss.backward()
    return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def assert_same_loss_and_gradients(expected, actual):
    torch.testing.assert_close(actual[0], expected[0], atol=1e-5, rtol=1e-5)
    assert actual[1].keys() == expected[1].keys()
    for name, gradient in expected[1].items():
        torch.testing.assert_close(actual[1][name], gradient, atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize("pattern", ["n=4 shifts 0-3", "n=2 3:1", "full"])
@pytest.mark.parametrize("model_class", [BlockBertForMaskedLM, BlockBertForTokenClassification])
def test_labels_at_padding_count_as_in_the_padded_computation(model_class, pattern, monkeypatch):
    """Labels at padding (`labels=input_ids`, say) count as the padded computation (and RoBERTa) counts them: that
    batch is computed with its padding, so its loss and gradients equal the padded computation's. A batch whose labels
    are -100 at padding stays padding-free."""
    padded, packed = paired_models(model_class, "sdpa", **PATTERNS[pattern])
    input_ids, attention_mask = random_batch(LENGTHS, 64, generator=torch.Generator().manual_seed(0))
    labels = input_ids % 2  # a label at every position, padding included
    layouts = []
    real_padding_free_layout = attention_blockbert.padding_free_layout
    monkeypatch.setattr(
        attention_blockbert, "padding_free_layout", lambda *args: layouts.append(1) or real_padding_free_layout(*args)
    )
    batch = dict(input_ids=input_ids, attention_mask=attention_mask)
    assert_same_loss_and_gradients(
        loss_and_gradients(padded, **batch, labels=labels), loss_and_gradients(packed, **batch, labels=labels)
    )
    assert not layouts  # computed with its padding
    without = labels.masked_fill(~attention_mask.bool(), -100)
    assert_same_loss_and_gradients(
        loss_and_gradients(padded, **batch, labels=without), loss_and_gradients(packed, **batch, labels=without)
    )
    assert layouts  # padding-free


def test_labels_at_padding_are_noted_once(caplog):
    from transformers.utils import logging as transformers_logging

    model = make_model(BlockBertForMaskedLM, tiny_config(), "sdpa")
    input_ids, attention_mask = random_batch([64, 30], 64)
    transformers_logging.warning_once.cache_clear()  # earlier tests of this process may have given the note already
    transformers_logging.enable_propagation()
    try:
        with caplog.at_level("WARNING"), torch.no_grad():
            for _ in range(3):
                model(input_ids, attention_mask=attention_mask, labels=input_ids)
    finally:
        transformers_logging.disable_propagation()
    assert sum("Labels at padding positions" in record.getMessage() for record in caplog.records) == 1


@pytest.mark.parametrize("model_class", [BlockBertForSequenceClassification, BlockBertForMultipleChoice])
def test_a_sequence_of_padding_only_gets_the_padded_computation_outputs(model_class):
    """A row of a labelled batch that is all padding: its logits and the loss equal the padded computation's (the
    batch is computed with its padding: padding-free has no real token to compute for that row)."""
    padded, packed = paired_models(model_class, "sdpa", num_labels=3)
    lengths = [64, 0, 20] if model_class is BlockBertForSequenceClassification else [64, 0, 20, 5, 0, 33]
    input_ids, attention_mask = random_batch(lengths, 64, generator=torch.Generator().manual_seed(0))
    batch = dict(input_ids=input_ids, attention_mask=attention_mask, labels=torch.tensor([0, 1, 2]))
    if model_class is BlockBertForMultipleChoice:
        batch = dict(input_ids=input_ids.view(2, 3, 64), attention_mask=attention_mask.view(2, 3, 64))
        batch["labels"] = torch.tensor([1, 2])
    with torch.no_grad():
        expected, actual = padded(**batch), packed(**batch)
    torch.testing.assert_close(actual.logits, expected.logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(actual.loss, expected.loss, atol=1e-5, rtol=1e-5)
