"""The model classes: every head with n = 1 is RoBERTa's head (and BERT with BERT positions), the outputs transformers'
common model tests check (attentions, hidden states, gradients through both), training, and inputs the model refuses."""

import pytest
import torch
from conftest import make_model, random_batch, tiny_config
from transformers import (
    BertConfig,
    BertModel,
    RobertaConfig,
    RobertaForMaskedLM,
    RobertaForMultipleChoice,
    RobertaForQuestionAnswering,
    RobertaForSequenceClassification,
    RobertaForTokenClassification,
    RobertaModel,
)

from blockbert_hf import (
    BlockBertForMaskedLM,
    BlockBertForMultipleChoice,
    BlockBertForQuestionAnswering,
    BlockBertForSequenceClassification,
    BlockBertForTokenClassification,
    BlockBertModel,
)


ROBERTA_FIELDS = dict(
    vocab_size=120,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=64,
    max_position_embeddings=66,
    type_vocab_size=1,
    layer_norm_eps=1e-5,
    pad_token_id=1,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)
ROBERTA_HEADS = {
    BlockBertModel: RobertaModel,
    BlockBertForMaskedLM: RobertaForMaskedLM,
    BlockBertForSequenceClassification: RobertaForSequenceClassification,
    BlockBertForTokenClassification: RobertaForTokenClassification,
    BlockBertForQuestionAnswering: RobertaForQuestionAnswering,
    BlockBertForMultipleChoice: RobertaForMultipleChoice,
}
NUM_LABELS = 3


def head_batch(model_class, seq_len: int = 64) -> dict:
    """A right-padded batch of two with the labels the head's loss takes (three choices each for multiple choice)."""
    if model_class is BlockBertForMultipleChoice:
        input_ids, attention_mask = random_batch([seq_len, 30, 50, 9, seq_len, 21], seq_len)
        batch = {"input_ids": input_ids.view(2, 3, seq_len), "attention_mask": attention_mask.view(2, 3, seq_len)}
        return {**batch, "labels": torch.tensor([0, 2])}
    input_ids, attention_mask = random_batch([seq_len, 30], seq_len)
    batch = {"input_ids": input_ids, "attention_mask": attention_mask}
    if model_class is BlockBertForMaskedLM:
        batch["labels"] = input_ids.masked_fill(~attention_mask.bool(), -100)
    elif model_class is BlockBertForQuestionAnswering:
        batch.update(start_positions=torch.tensor([1, 2]), end_positions=torch.tensor([3, 4]))
    elif model_class is BlockBertForSequenceClassification:
        batch["labels"] = torch.tensor([0, 2])
    elif model_class is BlockBertForTokenClassification:
        batch["labels"] = (input_ids % NUM_LABELS).masked_fill(~attention_mask.bool(), -100)
    return batch


# --- n = 1 is RoBERTa (docs/attention.md, "`n = 1` is RoBERTa") -------------------------------------------------------


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("blockbert_class", list(ROBERTA_HEADS), ids=lambda cls: cls.__name__)
def test_one_block_reproduces_roberta(blockbert_class, attn_implementation):
    """Every head, on RoBERTa's weights with n = 1: RoBERTa's outputs and loss at every real token, the padded
    batch computed with and without padding. The question-answering loss leaves padding out of its softmax
    (RoBERTa's counts it): it equals RoBERTa's loss over its logits with padding masked out."""
    num_labels = 2 if blockbert_class is BlockBertForQuestionAnswering else NUM_LABELS
    roberta_config = RobertaConfig(**ROBERTA_FIELDS, num_labels=num_labels)
    roberta = make_model(ROBERTA_HEADS[blockbert_class], roberta_config, attn_implementation)
    batch = head_batch(blockbert_class)
    with torch.no_grad():
        expected = roberta(**batch)
    if blockbert_class is BlockBertForQuestionAnswering:
        expected["loss"] = qa_loss_without_padding(expected, batch)
    is_real = batch["attention_mask"].bool()
    for padding_free in (True, False):
        config = tiny_config(num_blocks=1, num_labels=num_labels, padding_free=padding_free)
        blockbert = make_model(blockbert_class, config, attn_implementation)
        result = blockbert.load_state_dict(roberta.state_dict(), strict=True)
        assert not result.missing_keys and not result.unexpected_keys
        with torch.no_grad():
            actual = blockbert(**batch)
        assert actual.keys() == expected.keys()
        for name, value in expected.items():
            if value.shape[:2] == is_real.shape:  # one output per token
                value, actual[name] = value[is_real], actual[name][is_real]
            assert (actual[name] - value).abs().max() < 1e-5, (name, padding_free)


def qa_loss_without_padding(outputs, batch) -> torch.Tensor:
    """RoBERTa's question-answering loss over its logits, padding positions left out of the softmax."""
    is_padding = ~batch["attention_mask"].bool()
    losses = [
        torch.nn.functional.cross_entropy(logits.masked_fill(is_padding, torch.finfo(logits.dtype).min), positions)
        for logits, positions in (
            (outputs.start_logits, batch["start_positions"]),
            (outputs.end_logits, batch["end_positions"]),
        )
    ]
    return sum(losses) / 2


@pytest.mark.parametrize(
    "blockbert_class",
    [BlockBertForMaskedLM, BlockBertForTokenClassification, BlockBertForQuestionAnswering],
    ids=lambda cls: cls.__name__,
)
def test_labels_at_padding_give_robertas_loss_and_gradients(blockbert_class):
    """RoBERTa's inputs as users pass them (`labels = input_ids.clone()`, an answer position on padding): with n = 1
    and the defaults (padding-free), the loss and every gradient are RoBERTa's, and finite."""
    num_labels = 2 if blockbert_class is BlockBertForQuestionAnswering else NUM_LABELS
    roberta = ROBERTA_HEADS[blockbert_class](RobertaConfig(**ROBERTA_FIELDS, num_labels=num_labels))
    blockbert = blockbert_class(tiny_config(num_blocks=1, num_labels=num_labels))
    blockbert.load_state_dict(roberta.state_dict(), strict=True)
    input_ids, attention_mask = random_batch([64, 30], 64)
    batch = {"input_ids": input_ids, "attention_mask": attention_mask}
    if blockbert_class is BlockBertForQuestionAnswering:
        batch.update(start_positions=torch.tensor([3, 40]), end_positions=torch.tensor([5, 41]))  # row 1: padding
    else:
        batch["labels"] = input_ids % num_labels if blockbert_class is BlockBertForTokenClassification else input_ids
    results = []
    for model in (roberta, blockbert):
        loss = model(**batch).loss
        loss.backward()
        results.append((loss.detach(), {name: p.grad for name, p in model.named_parameters() if p.grad is not None}))
    (expected_loss, expected_gradients), (loss, gradients) = results
    assert torch.isfinite(loss)
    torch.testing.assert_close(loss, expected_loss, atol=1e-5, rtol=1e-5)
    assert gradients.keys() == expected_gradients.keys()
    for name, gradient in expected_gradients.items():
        torch.testing.assert_close(gradients[name], gradient, atol=1e-5, rtol=1e-4, msg=name)


def test_question_answering_loss_leaves_padding_out_while_labels_are_on_real_tokens():
    """Answers on real tokens: the loss's softmax leaves padding out (so padded and padding-free batches agree),
    where RoBERTa's counts it; so n = 1 differs from RoBERTa there, as docs/attention.md says."""
    roberta = RobertaForQuestionAnswering(RobertaConfig(**ROBERTA_FIELDS)).eval()
    blockbert = make_model(BlockBertForQuestionAnswering, tiny_config(num_blocks=1))
    blockbert.load_state_dict(roberta.state_dict(), strict=True)
    batch = head_batch(BlockBertForQuestionAnswering)
    with torch.no_grad():
        expected, actual = roberta(**batch), blockbert(**batch)
    torch.testing.assert_close(actual.loss, qa_loss_without_padding(expected, batch), atol=1e-5, rtol=1e-5)
    assert (actual.loss - expected.loss).abs() > 1e-3


def test_one_block_reproduces_bert_with_bert_positions():
    bert_fields = dict(
        ROBERTA_FIELDS, max_position_embeddings=64, type_vocab_size=2, layer_norm_eps=1e-12, pad_token_id=0
    )
    bert = make_model(BertModel, BertConfig(**bert_fields))
    blockbert = make_model(
        BlockBertModel,
        tiny_config(
            num_blocks=1,
            position_embedding_style="bert",
            **{
                k: bert_fields[k]
                for k in ("max_position_embeddings", "type_vocab_size", "layer_norm_eps", "pad_token_id")
            },
        ),
    )
    result = blockbert.load_state_dict(bert.state_dict(), strict=True)
    assert not result.missing_keys and not result.unexpected_keys
    input_ids, attention_mask = random_batch([64, 30], 64, pad_token_id=0)
    token_type_ids = (torch.arange(64) >= 20).long().expand(2, 64)
    with torch.no_grad():
        expected = bert(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        actual = blockbert(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
    real = attention_mask.bool()
    assert (actual[0][real] - expected[0][real]).abs().max() < 1e-5
    assert (actual.pooler_output - expected.pooler_output).abs().max() < 1e-5


# --- transformers' common model tests ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields, expected_shape",
    [
        ({}, (2, 4, 2, 32, 32)),  # blockwise: (batch, heads, blocks, b, b)
        ({"num_blocks": 4, "heads_per_shift": [1, 1, 1, 1]}, (2, 4, 4, 16, 16)),
        ({"num_blocks": 1, "heads_per_shift": [4]}, (2, 4, 64, 64)),  # n = 1: RoBERTa's shape
        ({"attention_pattern": "full"}, (2, 4, 64, 64)),
        ({"attention_pattern": "sparse_fixed", "sparse_stride": 8, "sparse_expressivity": 2}, (2, 4, 64, 64)),
    ],
)
def test_attentions_and_hidden_states_outputs(fields, expected_shape):
    config = tiny_config(**fields)
    model = make_model(BlockBertModel, config, "eager")
    input_ids, attention_mask = random_batch([64, 50], 64)
    assert model(input_ids, attention_mask=attention_mask).attentions is None  # only when asked
    outputs = model(input_ids, attention_mask=attention_mask, output_attentions=True, output_hidden_states=True)
    assert len(outputs.attentions) == config.num_hidden_layers
    assert all(tuple(attention.shape) == expected_shape for attention in outputs.attentions)
    assert len(outputs.hidden_states) == config.num_hidden_layers + 1
    assert all(tuple(hidden.shape) == (2, 64, config.hidden_size) for hidden in outputs.hidden_states)
    torch.testing.assert_close(outputs.hidden_states[-1], outputs.last_hidden_state)
    as_tuple = model(input_ids, attention_mask=attention_mask, output_attentions=True, return_dict=False)
    assert len(as_tuple) == 3 and len(as_tuple[2]) == config.num_hidden_layers


@pytest.mark.parametrize(
    "fields",
    [{}, {"num_blocks": 3, "heads_per_shift": [2, 1, 1]}, {"attention_pattern": "full"}],
    ids=["n=2", "n=3", "full"],
)
def test_gradients_flow_through_returned_attentions_and_hidden_states(fields):
    """transformers' `test_retain_grad_hidden_states_attentions`: the returned tensors are the ones in the graph."""
    model = make_model(BlockBertModel, tiny_config(**fields), "eager").train()
    input_ids, attention_mask = random_batch([64, 21], 64)
    outputs = model(input_ids, attention_mask=attention_mask, output_attentions=True, output_hidden_states=True)
    attentions, hidden_states = outputs.attentions[0], outputs.hidden_states[0]
    attentions.retain_grad()
    hidden_states.retain_grad()
    outputs.last_hidden_state.flatten()[0].backward()
    assert attentions.grad is not None and hidden_states.grad is not None
    assert attentions.grad.abs().sum() > 0


def test_returned_attentions_are_the_probabilities_that_multiply_values():
    """Rows of queries with no admissible key are zero in the returned probabilities and give zero output."""
    config = tiny_config(num_hidden_layers=1)
    model = make_model(BlockBertModel, config, "eager")
    input_ids, attention_mask = random_batch([20], 20)  # L <= b: the shift-1 head (head 3) sees no key
    captured = {}
    handle = model.encoder.layer[0].attention.self.register_forward_hook(
        lambda module, args, output: captured.update(context=output[0], weights=output[1])
    )
    with torch.no_grad():
        model(input_ids, attention_mask=attention_mask, output_attentions=True)
    handle.remove()
    weights = captured["weights"]
    assert weights[:, 3].abs().sum() == 0
    torch.testing.assert_close(weights[:, :3].sum(-1), torch.ones_like(weights[:, :3].sum(-1)))
    head_dim = config.hidden_size // config.num_attention_heads
    assert captured["context"][..., 3 * head_dim :].abs().sum() == 0


# --- training ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("model_class", list(ROBERTA_HEADS)[1:], ids=lambda cls: cls.__name__)
def test_training_reaches_every_parameter(model_class):
    num_labels = 2 if model_class is BlockBertForQuestionAnswering else NUM_LABELS
    model = model_class(tiny_config(num_labels=num_labels)).train()
    model(**head_batch(model_class)).loss.backward()
    # The pooler feeds only multiple choice; position rows past the input and the padding row get no gradient.
    no_grad = {name for name, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0}
    assert no_grad <= {"roberta.pooler.dense.weight", "roberta.pooler.dense.bias"}, no_grad


def test_gradient_checkpointing_gives_identical_gradients():
    config = tiny_config(num_blocks=3, heads_per_shift=[2, 1, 1])
    input_ids, attention_mask = random_batch([64, 40], 64)
    gradients, attention_calls = [], []
    for checkpointing in (False, True):
        torch.manual_seed(0)
        model = BlockBertForMaskedLM(config).train()
        if checkpointing:
            model.activation_checkpointing_enable()
        calls = []
        model.roberta.encoder.layer[0].attention.register_forward_hook(lambda *args, calls=calls: calls.append(1))
        labels = input_ids.masked_fill(~attention_mask.bool(), -100)
        model(input_ids, attention_mask=attention_mask, labels=labels).loss.backward()
        gradients.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
        attention_calls.append(len(calls))
    assert attention_calls == [1, 2]  # checkpointing recomputes the layer in the backward pass
    assert gradients[0].keys() == gradients[1].keys()
    for name in gradients[0]:
        torch.testing.assert_close(gradients[0][name], gradients[1][name], atol=1e-6, rtol=1e-5)


def test_sparse_prediction_gives_the_same_loss_with_logits_only_for_labelled_positions():
    input_ids, attention_mask = random_batch([40, 25], 40)
    labels = torch.full_like(input_ids, -100)
    labels[0, [3, 9]] = input_ids[0, [3, 9]]
    labels[1, 4] = input_ids[1, 4]
    dense = BlockBertForMaskedLM(tiny_config()).eval()
    sparse = BlockBertForMaskedLM(tiny_config(sparse_prediction=True)).eval()
    sparse.load_state_dict(dense.state_dict())
    with torch.no_grad():
        dense_out = dense(input_ids, attention_mask=attention_mask, labels=labels)
        sparse_out = sparse(input_ids, attention_mask=attention_mask, labels=labels)
        unlabelled = sparse(input_ids, attention_mask=attention_mask)
    assert sparse_out.logits.shape == (3, 120) and unlabelled.logits.shape == (2, 40, 120)
    torch.testing.assert_close(sparse_out.loss, dense_out.loss)
    torch.testing.assert_close(sparse_out.logits, dense_out.logits[labels != -100])


def test_resize_token_embeddings_keeps_the_decoder_tied():
    model = BlockBertForMaskedLM(tiny_config())
    model.resize_token_embeddings(130)
    assert model.config.vocab_size == 130
    assert model.lm_head.decoder.weight.shape == (130, 32)
    assert model.lm_head.decoder.weight.data_ptr() == model.roberta.embeddings.word_embeddings.weight.data_ptr()
    assert model(torch.randint(3, 130, (1, 10))).logits.shape == (1, 10, 130)


# --- inputs -----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "inputs, message",
    [
        ({"input_ids": torch.ones(1, 0, dtype=torch.long)}, "sequence length 0"),
        ({"input_ids": torch.ones(0, 8, dtype=torch.long)}, r"input_ids has batch size 0 \(shape \(0, 8\)\)"),
        ({"inputs_embeds": torch.zeros(0, 8, 32)}, r"inputs_embeds has batch size 0"),
        ({"input_ids": torch.tensor([0, 5, 6, 2])}, r"add the batch dimension \(input_ids\[None\]\)"),
        ({"inputs_embeds": torch.zeros(5, 32)}, r"inputs_embeds has shape \(5, 32\); expected 3 dimensions"),
        ({}, "exactly one of input_ids or inputs_embeds"),
    ],
)
def test_unusable_inputs_get_a_clear_error(inputs, message):
    model = make_model(BlockBertModel, tiny_config())
    with pytest.raises(ValueError, match=message):
        model(**inputs)


def test_a_traced_model_keeps_the_attention_mask():
    """torch.jit.trace of an unpadded batch must not bake in the 'nothing is padded' shortcut."""
    model = make_model(BlockBertModel, tiny_config(), "eager")
    model.config.return_dict = False
    unpadded = random_batch([40, 40], 40)
    with torch.no_grad():
        traced = torch.jit.trace(model, unpadded, check_trace=False, strict=False)
        input_ids, attention_mask = random_batch([40, 27], 40)
        expected = model(input_ids, attention_mask=attention_mask)[0]
        actual = traced(input_ids, attention_mask)[0]
    torch.testing.assert_close(actual[attention_mask.bool()], expected[attention_mask.bool()], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("value", [0.5, 2.0, -1.0])
def test_attention_mask_values_other_than_0_count_as_real_tokens_as_in_roberta(value):
    """Any non-zero mask value marks a real token, as RoBERTa reads it (docs/attention.md, "Inputs")."""
    input_ids, attention_mask = random_batch([64, 30], 64)
    changed = attention_mask.float().clone()
    changed[0, 5] = changed[1, 3] = value
    roberta = make_model(RobertaModel, RobertaConfig(**ROBERTA_FIELDS))
    blockbert = make_model(BlockBertModel, tiny_config())
    with torch.no_grad():
        for model in (roberta, blockbert):
            expected = model(input_ids, attention_mask=attention_mask).last_hidden_state
            torch.testing.assert_close(
                model(input_ids, attention_mask=changed).last_hidden_state, expected, atol=0, rtol=0
            )


def test_a_head_mask_that_would_change_the_outputs_is_refused():
    """transformers 5 dropped head masking: RoBERTa takes `head_mask=` and ignores it. A mask that keeps every head
    changes nothing and is accepted; one that would mask a head is refused rather than ignored."""
    model = make_model(BlockBertForMaskedLM, tiny_config())
    input_ids, attention_mask = random_batch([64, 30], 64)
    with torch.no_grad():
        expected = model(input_ids, attention_mask=attention_mask).logits
        kept = model(input_ids, attention_mask=attention_mask, head_mask=torch.ones(2, 4)).logits
        torch.testing.assert_close(kept, expected, atol=0, rtol=0)
        with pytest.raises(ValueError, match="head_mask is not supported"):
            model(input_ids, attention_mask=attention_mask, head_mask=torch.tensor([[1.0, 0.0, 1.0, 1.0]] * 2))
