"""`--resume` from a run folder whose latest checkpoint is corrupted (truncated weights or optimizer state, a broken
`trainer_state.json`) falls back to the newest complete one and says which it skipped and why; a corrupted checkpoint
named by its path is refused with the reason."""

import json
import logging
from dataclasses import replace

import pytest
import torch
from accelerate import Accelerator
from conftest import SAMPLE_TEXT

from blockbert_hf.train.pretraining import PretrainingArguments, list_checkpoints, run_pretraining
from blockbert_hf.train.runs import (
    OutputDirError,
    OutputLayout,
    check_output_dir,
    create_optimizer,
    create_scheduler,
    load_checkpoint,
    save_checkpoint,
)


LAYOUT = OutputLayout(finished=("final_model",))
ARGS = {"learning_rate": 0.1}


def _truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _break_json(path):
    path.write_text(path.read_text()[:-5])


CORRUPTIONS = {
    "truncated weights": ("model.safetensors", _truncate),
    "truncated optimizer state": ("optimizer.bin", _truncate),
    "broken trainer state": ("trainer_state.json", _break_json),
}


@pytest.fixture
def three_checkpoints(tmp_path):
    """Checkpoints step_1..step_3 of a linear model trained with AdamW, and the model's weights at each step."""
    accelerator = Accelerator()
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    optimizer = create_optimizer(model, learning_rate=0.1, weight_decay=0.0)
    scheduler = create_scheduler(accelerator, optimizer, total_steps=10, num_warmup_steps=0)
    model, optimizer = accelerator.prepare(model, optimizer)
    weights = {}
    for step in (1, 2, 3):
        accelerator.backward(model(torch.ones(3, 4)).square().sum())
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        save_checkpoint(accelerator, tmp_path, step, {"run_args": ARGS})
        weights[step] = model.weight.detach().clone()
    return accelerator, model, weights


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_resume_falls_back_from_a_corrupted_latest_checkpoint(corruption, three_checkpoints, tmp_path, caplog):
    accelerator, model, weights = three_checkpoints
    name, corrupt = CORRUPTIONS[corruption]
    corrupt(tmp_path / "checkpoints" / "step_3" / name)
    with caplog.at_level(logging.WARNING):
        checkpoint = check_output_dir(tmp_path, ARGS, LAYOUT, resume_from="latest")
    assert checkpoint == tmp_path / "checkpoints" / "step_2"
    skipped = [record.getMessage() for record in caplog.records if "step_3" in record.getMessage()]
    assert len(skipped) == 1 and name in skipped[0] and "step_2" in skipped[0], caplog.text
    assert load_checkpoint(accelerator, checkpoint)["step"] == 2
    assert torch.equal(model.weight, weights[2])


def test_resume_without_a_complete_checkpoint_or_from_a_corrupted_one_says_why(three_checkpoints, tmp_path):
    for step in (1, 2, 3):
        _truncate(tmp_path / "checkpoints" / f"step_{step}" / "model.safetensors")
    with pytest.raises(OutputDirError, match=r"no usable checkpoint.*step_3.*model.safetensors.*step_1"):
        check_output_dir(tmp_path, ARGS, LAYOUT, resume_from="latest")
    named = tmp_path / "checkpoints" / "step_2"
    with pytest.raises(OutputDirError, match=f"Cannot resume from {named}: .*model.safetensors"):
        check_output_dir(tmp_path / "other", ARGS, LAYOUT, resume_from=str(named))


def test_a_pretraining_run_resumes_from_the_checkpoint_before_a_corrupted_latest_one(tmp_path, caplog):
    """The run goes on from step_2 past the truncated step_4 and finishes, writing step_4 again."""
    args = PretrainingArguments(
        output_dir=str(tmp_path), train_files=[str(SAMPLE_TEXT)], document_boundary="heading",
        train_tokenizer_vocab_size=600, max_seq_length=64, num_hidden_layers=1, hidden_size=32, num_attention_heads=4,
        num_blocks=2, tokens_per_batch=256, per_device_train_batch_size=4, max_train_steps=5, checkpointing_steps=2,
        save_total_limit=None, logging_steps=1, report_to="none",
    )  # fmt: skip
    assert not run_pretraining(replace(args, stop_after_step=4))["finished"]
    assert [path.name for path in list_checkpoints(tmp_path)] == ["step_2", "step_4"]
    _truncate(tmp_path / "checkpoints" / "step_4" / "model.safetensors")
    with caplog.at_level(logging.WARNING):
        results = run_pretraining(replace(args, resume=True))
    assert results["finished"] and results["step"] == 5
    assert "step_4" in caplog.text and "model.safetensors" in caplog.text
    steps = [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4, 5]  # the records after step_2 were logged again, once
    assert [path.name for path in list_checkpoints(tmp_path)] == ["step_2", "step_4"]
