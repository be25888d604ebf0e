"""What transformers' common model tests check, for BlockBERT: save/load, attentions, hidden states, gradients through
both, config round-trips; plus the block size contract (derived unless set), input errors, tracing and atomic saving.
"""

import copy
import json

import pytest
import torch
from conftest import REPO_ROOT, make_model, random_batch, tiny_config
from huggingface_hub.errors import StrictDataclassFieldValidationError
from safetensors.torch import load_file

from blockbert_hf import (
    BlockBertConfig,
    BlockBertForMaskedLM,
    BlockBertForMultipleChoice,
    BlockBertForQuestionAnswering,
    BlockBertForSequenceClassification,
    BlockBertForTokenClassification,
    BlockBertModel,
)


HEAD_CLASSES = [
    BlockBertModel,
    BlockBertForMaskedLM,
    BlockBertForQuestionAnswering,
    BlockBertForSequenceClassification,
    BlockBertForTokenClassification,
]
V01_FOLDER = REPO_ROOT / "tests" / "fixtures" / "blockbert-mlm-v0.1"
V01_EXPECTED = REPO_ROOT / "tests" / "fixtures" / "blockbert-mlm-v0.1-expected.safetensors"


def first_output(outputs) -> torch.Tensor:
    for name in ("logits", "start_logits", "last_hidden_state"):
        if getattr(outputs, name, None) is not None:
            return getattr(outputs, name)
    raise AssertionError("no output tensor")


# --- transformers' common model tests ---------------------------------------------------------------------------------


@pytest.mark.parametrize("model_class", HEAD_CLASSES)
def test_save_load_gives_the_same_outputs(model_class, tmp_path):
    model = make_model(model_class, tiny_config())
    input_ids, attention_mask = random_batch([64, 40], 64)
    with torch.no_grad():
        before = first_output(model(input_ids, attention_mask=attention_mask))
    model.save_pretrained(tmp_path / "saved")
    reloaded = model_class.from_pretrained(tmp_path / "saved").eval()
    with torch.no_grad():
        after = first_output(reloaded(input_ids, attention_mask=attention_mask))
    torch.testing.assert_close(before, after, atol=0, rtol=0)
    assert reloaded.config.to_json_string() == model.config.to_json_string()


@pytest.mark.parametrize(
    "fields, expected_shape",
    [
        ({}, (2, 4, 2, 32, 32)),  # blockwise: (batch, heads, tiles, b, b)
        ({"num_blocks": 4, "heads_per_shift": [1, 1, 1, 1]}, (2, 4, 4, 16, 16)),
        ({"attention_pattern": "full"}, (2, 4, 64, 64)),
        ({"attention_pattern": "sparse_fixed", "sparse_stride": 8, "sparse_expressivity": 2}, (2, 4, 64, 64)),
    ],
)
def test_attentions_and_hidden_states_outputs(fields, expected_shape):
    config = tiny_config(**fields)
    model = make_model(BlockBertModel, config, "eager")
    input_ids, attention_mask = random_batch([64, 50], 64)
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


@pytest.mark.parametrize("model_class", HEAD_CLASSES[1:] + [BlockBertForMultipleChoice])
def test_training_reaches_every_parameter(model_class):
    config = tiny_config(num_labels=2 if model_class is BlockBertForQuestionAnswering else 3)
    model = model_class(config).train()
    input_ids, attention_mask = random_batch([64, 30], 64)
    batch = {"input_ids": input_ids, "attention_mask": attention_mask}
    if model_class is BlockBertForMaskedLM:
        batch["labels"] = input_ids.masked_fill(~attention_mask.bool(), -100)
    elif model_class is BlockBertForQuestionAnswering:
        batch.update(start_positions=torch.tensor([1, 2]), end_positions=torch.tensor([3, 4]))
    elif model_class is BlockBertForSequenceClassification:
        batch["labels"] = torch.tensor([0, 2])
    elif model_class is BlockBertForTokenClassification:
        batch["labels"] = torch.zeros_like(input_ids)
    else:
        batch = {key: value[:, None].expand(2, 3, 64) for key, value in batch.items()}
        batch["labels"] = torch.tensor([0, 2])
    model(**batch).loss.backward()
    # The pooler feeds only multiple choice; position rows past the input and the padding row get no gradient.
    no_grad = {name for name, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0}
    assert no_grad <= {"roberta.pooler.dense.weight", "roberta.pooler.dense.bias"}, no_grad


def test_config_round_trips_through_json_and_from_dict(tmp_path):
    config = tiny_config(num_blocks=3, heads_per_shift="2:1:1", attention_pattern="blockwise", num_labels=5)
    config.save_pretrained(tmp_path)
    reloaded = BlockBertConfig.from_pretrained(tmp_path)
    assert reloaded.to_dict() == config.to_dict()
    assert BlockBertConfig.from_dict(config.to_dict()).to_dict() == config.to_dict()
    assert BlockBertConfig.from_json_file(tmp_path / "config.json").heads_per_shift == [2, 1, 1]
    assert reloaded.num_labels == 5 and reloaded.block_size == 22


def test_config_fields_of_the_wrong_type_name_the_field():
    with pytest.raises(StrictDataclassFieldValidationError, match="num_blocks"):
        BlockBertConfig(num_blocks="2")
    with pytest.raises(StrictDataclassFieldValidationError, match="block_size"):
        BlockBertConfig(block_size=3.5)


# --- the block size: derived from the current N and n unless the user set it ------------------------------------------


def test_an_unset_block_size_follows_num_blocks_and_n(tmp_path):
    config = tiny_config()
    assert (config.block_size, config.block_size_is_set) == (32, False)
    config.num_blocks, config.heads_per_shift = 4, [1, 1, 1, 1]
    assert config.block_size == 16
    config.max_position_embeddings = 130  # N = 128
    assert config.block_size == 32
    config.pad_token_id = 0  # RoBERTa positions: N = max_position_embeddings - pad - 1 = 129
    assert config.block_size == 33
    model = BlockBertModel(config)
    model.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["block_size"] is None
    assert BlockBertConfig.from_pretrained(tmp_path).block_size == 33


def test_from_pretrained_with_a_new_num_blocks_derives_the_block_size(tmp_path):
    model = make_model(BlockBertModel, tiny_config())
    model.save_pretrained(tmp_path)
    reloaded = BlockBertModel.from_pretrained(tmp_path, num_blocks=4, heads_per_shift=[1, 1, 1, 1])
    assert reloaded.config.block_size == 16
    input_ids, _ = random_batch([64], 64)
    with torch.no_grad():
        captured = []
        handle = reloaded.encoder.layer[0].attention.self.register_forward_hook(
            lambda module, args, output: captured.append(output[1])
        )
        reloaded.set_attn_implementation("eager")
        reloaded(input_ids, output_attentions=True)
        handle.remove()
    assert tuple(captured[0].shape[2:]) == (4, 16, 16)  # four blocks of 16, as the config says


def test_a_block_size_set_by_the_user_is_kept_and_validated(tmp_path):
    config = tiny_config(block_size=40)
    assert (config.block_size, config.block_size_is_set) == (40, True)
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


def test_a_folder_saved_by_v0_1_loads_with_the_same_logits():
    expected = load_file(V01_EXPECTED)
    for implementation in ("sdpa", "eager"):
        model = BlockBertForMaskedLM.from_pretrained(V01_FOLDER, attn_implementation=implementation).eval()
        with torch.no_grad():
            logits = model(input_ids=expected["input_ids"], attention_mask=expected["attention_mask"]).logits
        torch.testing.assert_close(logits, expected["logits"], atol=1e-5, rtol=1e-5)
    config = BlockBertConfig.from_pretrained(V01_FOLDER)  # it stores the derived block size, 16
    assert (config.block_size, config.block_size_is_set) == (16, False)
    assert BlockBertConfig.from_pretrained(V01_FOLDER, num_blocks=4, heads_per_shift=[1, 1, 1, 1]).block_size == 8


# --- inputs, tracing, saving ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "inputs, message",
    [
        ({"input_ids": torch.ones(1, 0, dtype=torch.long)}, "sequence length 0"),
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


def test_a_save_that_fails_half_way_leaves_the_folder_as_it_was(tmp_path, monkeypatch):
    import transformers.modeling_utils

    model = BlockBertModel(tiny_config())
    (tmp_path / "earlier").mkdir()
    (tmp_path / "earlier" / "tokenizer.json").write_text("{}")
    model.save_pretrained(tmp_path / "earlier")
    before = {path.name: path.read_bytes() for path in (tmp_path / "earlier").iterdir()}

    def failing_write(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(transformers.modeling_utils, "safe_save_file", failing_write)
    changed = copy.deepcopy(model)
    changed.config.num_blocks, changed.config.heads_per_shift = 4, [1, 1, 1, 1]
    with pytest.raises(OSError, match="disk full"):
        changed.save_pretrained(tmp_path / "earlier")
    with pytest.raises(OSError, match="disk full"):
        changed.save_pretrained(tmp_path / "new")
    assert {path.name: path.read_bytes() for path in (tmp_path / "earlier").iterdir()} == before
    assert sorted(path.name for path in tmp_path.iterdir()) == ["earlier"]  # no new folder, no staging left


def test_saved_files_get_the_modes_the_umask_gives_any_new_file(tmp_path):
    import os
    import stat

    umask = os.umask(0o022)
    try:
        BlockBertModel(tiny_config()).save_pretrained(tmp_path / "model")
    finally:
        os.umask(umask)
    modes = {path.name: stat.S_IMODE(path.stat().st_mode) for path in (tmp_path / "model").iterdir()}
    assert modes["model.safetensors"] == modes["config.json"] == 0o644
    assert stat.S_IMODE((tmp_path / "model").stat().st_mode) == 0o755


def test_saving_into_a_folder_keeps_other_files_and_replaces_old_weights(tmp_path):
    (tmp_path / "tokenizer.json").write_text("{}")
    (tmp_path / "model-00001-of-00002.safetensors").write_text("an earlier sharded save")
    BlockBertModel(tiny_config()).save_pretrained(tmp_path)
    names = sorted(path.name for path in tmp_path.iterdir())
    assert "tokenizer.json" in names and "model.safetensors" in names
    assert "model-00001-of-00002.safetensors" not in names
    assert BlockBertModel.from_pretrained(tmp_path) is not None
