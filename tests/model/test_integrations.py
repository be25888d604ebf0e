"""What users combine BlockBERT with (docs/ecosystem.md): `transformers.Trainer` on every head (in bf16 with activation
checkpointing too), loading with `device_map` and in bf16, transformers' fill-mask pipeline, PEFT LoRA on the attention
projections."""

import copy

import peft
import pytest
import torch
from conftest import random_batch, tiny_config
from transformers import Trainer, TrainingArguments, pipeline

from blockbert_hf import (
    BlockBertForMaskedLM,
    BlockBertForMultipleChoice,
    BlockBertForQuestionAnswering,
    BlockBertForSequenceClassification,
    BlockBertForTokenClassification,
)
from blockbert_hf.tokenization import match_tokenizer_to_config


NUM_EXAMPLES, SEQ_LEN, NUM_CHOICES = 8, 40, 3


def _examples(model_class) -> list[dict]:
    """A tiny in-memory dataset with the labels each head's loss takes; lengths vary, so rows carry padding."""
    lengths = [SEQ_LEN - 5 * (row % 4) for row in range(NUM_EXAMPLES)]
    if model_class is BlockBertForMultipleChoice:
        ids, mask = random_batch(lengths * NUM_CHOICES, SEQ_LEN)
        ids, mask = ids.view(NUM_CHOICES, NUM_EXAMPLES, SEQ_LEN), mask.view(NUM_CHOICES, NUM_EXAMPLES, SEQ_LEN)
        return [
            {"input_ids": ids[:, row], "attention_mask": mask[:, row], "labels": torch.tensor(row % NUM_CHOICES)}
            for row in range(NUM_EXAMPLES)
        ]
    ids, mask = random_batch(lengths, SEQ_LEN)
    examples = []
    for row, length in enumerate(lengths):
        example = {"input_ids": ids[row], "attention_mask": mask[row]}
        if model_class is BlockBertForMaskedLM:
            example["labels"] = torch.where(torch.rand(SEQ_LEN) < 0.3, ids[row], -100).masked_fill(mask[row] == 0, -100)
        elif model_class is BlockBertForTokenClassification:
            example["labels"] = (ids[row] % 3).masked_fill(mask[row] == 0, -100)
        elif model_class is BlockBertForQuestionAnswering:
            example["start_positions"] = torch.tensor(row % length)
            example["end_positions"] = torch.tensor(min(row % length + 2, length - 1))
        else:
            example["labels"] = torch.tensor(row % 2)
        examples.append(example)
    return examples


@pytest.mark.parametrize(
    "model_class",
    [
        BlockBertForMaskedLM,
        BlockBertForQuestionAnswering,
        BlockBertForSequenceClassification,
        BlockBertForTokenClassification,
        BlockBertForMultipleChoice,
    ],
)
def test_trainer_trains_every_head(model_class, tmp_path):
    model = model_class(tiny_config(num_labels=3 if model_class is BlockBertForTokenClassification else 2))
    before = {name: parameter.detach().clone() for name, parameter in model.named_parameters()}
    args = TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=4,
        max_steps=3,
        learning_rate=1e-3,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
    )
    trainer = Trainer(model=model, args=args, train_dataset=_examples(model_class))
    trainer.train()

    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 3 and torch.isfinite(torch.tensor(losses)).all(), losses
    unchanged = [name for name, parameter in model.named_parameters() if torch.equal(parameter, before[name])]
    # named_parameters lists tied tensors (MLM decoder and word embeddings) once: every one of them must have moved.
    assert not unchanged, f"{model_class.__name__}: parameters the Trainer did not update: {unchanged}"


def test_trainer_lowers_the_loss(tmp_path):
    model = BlockBertForSequenceClassification(tiny_config())
    input_ids, attention_mask = random_batch([40] * 16, 40)
    labels = (input_ids[:, 0] % 2).long()
    dataset = [dict(input_ids=i, attention_mask=m, labels=y) for i, m, y in zip(input_ids, attention_mask, labels)]
    args = TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=8,
        num_train_epochs=15,
        learning_rate=3e-3,
        report_to=[],
        save_strategy="no",
        logging_steps=1,
        use_cpu=True,
    )
    trainer = Trainer(model=model, args=args, train_dataset=dataset)
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert losses[-1] < losses[0]


def test_trainer_in_bf16_with_activation_checkpointing(tmp_path):
    """The Trainer's mixed precision (bf16 autocast on the CPU) and activation checkpointing, as docs/ecosystem.md
    shows them."""
    model = BlockBertForQuestionAnswering(tiny_config())
    args = TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=4,
        max_steps=1,
        learning_rate=1e-3,
        bf16=True,
        activation_checkpointing=True,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
    )
    trainer = Trainer(model=model, args=args, train_dataset=_examples(BlockBertForQuestionAnswering))
    calls = []
    attention = model.roberta.encoder.layer[0].attention.self
    attention.register_forward_hook(lambda module, inputs, output: calls.append(output[0].dtype))
    trainer.train()
    assert model.is_activation_checkpointing
    assert calls == [torch.bfloat16] * 2  # in bf16 autocast, and run again in the backward pass
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 1 and torch.isfinite(torch.tensor(losses)).all()


# ---------------------------------------------------------------------------------------------------------------------
# Loading: device_map, bf16 weights
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "device_map",
    ["cpu", "auto", {"roberta.embeddings": "cpu", "roberta.encoder": "cpu", "qa_outputs": "cpu"}],
    ids=["cpu", "auto", "per-module"],
)
def test_a_saved_model_loads_with_a_device_map_and_computes_the_same(device_map, tmp_path):
    """`from_pretrained(..., device_map=...)` (accelerate's placement; "auto" is the CPU on a machine without an
    accelerator) gives the saved model's outputs; with `dtype=torch.bfloat16` too, within bf16's precision."""
    model = BlockBertForQuestionAnswering(tiny_config()).eval()
    model.save_pretrained(tmp_path / "model")
    input_ids, attention_mask = random_batch([SEQ_LEN, 25], SEQ_LEN)
    with torch.no_grad():
        expected = model(input_ids, attention_mask=attention_mask).start_logits

    placed = BlockBertForQuestionAnswering.from_pretrained(tmp_path / "model", device_map=device_map).eval()
    assert {parameter.device.type for parameter in placed.parameters()} == {"cpu"}
    with torch.no_grad():
        torch.testing.assert_close(placed(input_ids, attention_mask=attention_mask).start_logits, expected)

    in_bf16 = BlockBertForQuestionAnswering.from_pretrained(
        tmp_path / "model", device_map=device_map, dtype=torch.bfloat16
    ).eval()
    assert {parameter.dtype for parameter in in_bf16.parameters()} == {torch.bfloat16}
    with torch.no_grad():
        logits = in_bf16(input_ids, attention_mask=attention_mask).start_logits
    assert logits.dtype == torch.bfloat16
    torch.testing.assert_close(logits.float(), expected, atol=0.05, rtol=0.05)


# ---------------------------------------------------------------------------------------------------------------------
# Pipelines
# ---------------------------------------------------------------------------------------------------------------------


def test_fill_mask_pipeline_fills_in_what_the_model_predicts(tokenizer):
    config = tiny_config(vocab_size=len(tokenizer))
    model = BlockBertForMaskedLM(config).eval()
    (made,) = tokenizer(" made", add_special_tokens=False).input_ids
    with torch.no_grad():
        model.lm_head.bias[made] = 20.0  # the untrained head now predicts " made" at every position
    text = f"The battleship was{tokenizer.mask_token} in 1912."  # the mask stands for " made", space included
    fill = pipeline("fill-mask", model=model, tokenizer=match_tokenizer_to_config(tokenizer, config))
    predictions = fill(text, top_k=3)
    assert predictions[0]["token"] == made and predictions[0]["token_str"].strip() == "made"
    assert predictions[0]["sequence"] == "The battleship was made in 1912."
    # The three candidates and their scores are the model's own at the masked position.
    inputs = tokenizer(text, return_tensors="pt")
    (position,) = (inputs.input_ids[0] == tokenizer.mask_token_id).nonzero()[0].tolist()
    with torch.no_grad():
        top = model(**inputs).logits[0, position].softmax(-1).topk(3)
    assert [prediction["token"] for prediction in predictions] == top.indices.tolist()
    torch.testing.assert_close(torch.tensor([prediction["score"] for prediction in predictions]), top.values)


# ---------------------------------------------------------------------------------------------------------------------
# PEFT LoRA
# ---------------------------------------------------------------------------------------------------------------------


def test_peft_lora_on_the_attention_projections(tmp_path):
    config = tiny_config()
    base = BlockBertForMaskedLM(config).eval()
    base_copy = copy.deepcopy(base)  # get_peft_model wraps `base` in place
    input_ids, attention_mask = random_batch([SEQ_LEN, 25], SEQ_LEN)
    labels = input_ids.masked_fill(attention_mask == 0, -100)
    with torch.no_grad():
        base_logits = base(input_ids, attention_mask=attention_mask).logits

    lora = peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["query", "key", "value"])
    model = peft.get_peft_model(base, lora)
    trainable = {name for name, parameter in model.named_parameters() if parameter.requires_grad}
    assert trainable and all(".lora_A." in name or ".lora_B." in name for name in trainable)
    wrapped = {name.rsplit(".", 1)[-1] for name, module in model.named_modules() if hasattr(module, "lora_A")}
    assert wrapped == {"query", "key", "value"}
    assert len(trainable) == 2 * 3 * config.num_hidden_layers  # lora_A and lora_B of 3 projections per layer

    model.train()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    for _ in range(2):  # lora_B starts at zero: after two steps lora_A has had gradients too
        optimizer.zero_grad()
        loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
        assert torch.isfinite(loss)
        loss.backward()
        with_gradient = {name for name, p in model.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0}
        assert with_gradient <= trainable
        optimizer.step()
    assert with_gradient == trainable

    model.eval()
    with torch.no_grad():
        adapted = model(input_ids=input_ids, attention_mask=attention_mask).logits
    assert (adapted - base_logits).abs().max() > 1e-4  # the adapters changed what the model computes

    model.save_pretrained(tmp_path / "adapter")
    assert {"adapter_config.json", "adapter_model.safetensors"} <= {p.name for p in (tmp_path / "adapter").iterdir()}
    reloaded = peft.PeftModel.from_pretrained(base_copy, tmp_path / "adapter").eval()
    with torch.no_grad():
        torch.testing.assert_close(
            reloaded(input_ids=input_ids, attention_mask=attention_mask).logits, adapted, rtol=0, atol=1e-6
        )

    merged = model.merge_and_unload()
    assert type(merged) is BlockBertForMaskedLM and not any("lora_" in name for name, _ in merged.named_parameters())
    with torch.no_grad():
        merged_logits = merged(input_ids, attention_mask=attention_mask).logits
    torch.testing.assert_close(merged_logits, adapted, rtol=0, atol=1e-5)


def test_peft_lora_for_question_answering_trains_the_adapters_and_the_qa_head():
    """With PEFT's task type, the new QA head is trained in full beside the attention adapters (docs/ecosystem.md)."""
    lora = peft.LoraConfig(task_type="QUESTION_ANS", r=4, lora_alpha=8, target_modules=["query", "key", "value"])
    model = peft.get_peft_model(BlockBertForQuestionAnswering(tiny_config()), lora)
    trainable = {name for name, parameter in model.named_parameters() if parameter.requires_grad}
    head = {name for name in trainable if ".lora_" not in name}
    assert len(trainable - head) == 2 * 3 * 2  # lora_A and lora_B of 3 projections in each of the 2 layers
    assert head and all(".qa_outputs.modules_to_save." in name for name in head)
