"""The training toolkit (`blockbert_hf.train.runs`) shared by pre-training and QA fine-tuning: output-folder and launch
guards, atomic checkpoints with rotation and resume, the metrics log, the non-finite loss guard, the optimizer's
weight-decay groups; and `--help` of every example script."""

import json
import runpy
import sys
import weakref
from types import SimpleNamespace

import pytest
import torch
from accelerate import Accelerator
from conftest import REPO_ROOT, tiny_config

from blockbert_hf import BlockBertForMaskedLM
from blockbert_hf.saving import OutputOverwritesInputError
from blockbert_hf.train import runs
from blockbert_hf.train.runs import (
    MetricsLog,
    NonFiniteLossError,
    OutputDirError,
    OutputLayout,
    check_finite,
    check_launch,
    check_output_dir,
    claim_output_dir,
    create_optimizer,
    create_scheduler,
    end_run,
    list_checkpoints,
    load_checkpoint,
    read_metrics,
    save_checkpoint,
    step_scheduler,
    warn_emulated_bf16,
)


LAYOUT = OutputLayout(finished=("final_model",), other=("tokenizer",), resume_safe=frozenset({"logging_steps"}))
ARGS = {"learning_rate": 1e-3, "num_blocks": 2, "logging_steps": 10}


def _linear_run(accelerator):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    optimizer = create_optimizer(model, learning_rate=0.1, weight_decay=0.01)
    scheduler = create_scheduler(accelerator, optimizer, total_steps=10, num_warmup_steps=2)
    model, optimizer = accelerator.prepare(model, optimizer)
    return model, optimizer, scheduler


def _step(accelerator, model, optimizer, scheduler):
    accelerator.backward(model(torch.ones(3, 4)).square().sum())
    optimizer.step()
    step_scheduler(accelerator, scheduler)
    optimizer.zero_grad()


# ---------------------------------------------------------------------------------------------------------------------
# Checkpoints
# ---------------------------------------------------------------------------------------------------------------------


def test_checkpoints_are_rotated_to_the_newest_and_resume_restores_the_state(tmp_path):
    accelerator = Accelerator()
    model, optimizer, scheduler = _linear_run(accelerator)
    for step in (1, 2, 3):
        _step(accelerator, model, optimizer, scheduler)
        save_checkpoint(accelerator, tmp_path, step, {"metrics_lines": step}, save_total_limit=2)
    assert [path.name for path in list_checkpoints(tmp_path)] == ["step_2", "step_3"]
    assert not [path.name for path in (tmp_path / "checkpoints").iterdir() if path.name.startswith(".")]
    saved_weight, saved_lr = model.weight.detach().clone(), scheduler.get_last_lr()

    _step(accelerator, model, optimizer, scheduler)
    assert not torch.equal(model.weight, saved_weight)
    state = load_checkpoint(accelerator, list_checkpoints(tmp_path)[-1])
    assert state == {"step": 3, "metrics_lines": 3}
    assert torch.equal(model.weight, saved_weight) and scheduler.get_last_lr() == saved_lr


def test_claiming_a_folder_removes_what_killed_writes_left_and_records_the_arguments(tmp_path):
    kept = tmp_path / "checkpoints" / "step_1"
    kept.mkdir(parents=True)
    (kept / "trainer_state.json").write_text("{}")
    for stale in (".step_3.tmp-k2j4x", ".step_2.old-4242"):
        (tmp_path / "checkpoints" / stale).mkdir()
        (tmp_path / "checkpoints" / stale / "model.safetensors").write_text("half")
    (tmp_path / ".tokenizer.tmp-abc").mkdir()
    claim_output_dir(None, tmp_path, ARGS, LAYOUT)
    assert sorted(path.name for path in (tmp_path / "checkpoints").iterdir()) == ["step_1"]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["checkpoints", "run_args.json"]
    assert json.loads((tmp_path / "run_args.json").read_text()) == ARGS

    claim_output_dir(None, tmp_path, ARGS, LAYOUT, overwrite=True)  # an earlier run's outputs go
    assert sorted(path.name for path in tmp_path.iterdir()) == ["run_args.json"]


# ---------------------------------------------------------------------------------------------------------------------
# The output folder guard
# ---------------------------------------------------------------------------------------------------------------------


def _checkpoint(folder, step, run_args):
    path = folder / "checkpoints" / f"step_{step}"
    path.mkdir(parents=True)
    (path / "trainer_state.json").write_text(json.dumps({"step": step, "run_args": run_args}))
    return path


def test_a_fresh_run_refuses_a_folder_of_another_or_a_finished_run(tmp_path):
    assert check_output_dir(tmp_path / "new", ARGS, LAYOUT) is None
    (tmp_path / "run_args.json").write_text(json.dumps(ARGS))
    assert check_output_dir(tmp_path, {**ARGS, "logging_steps": 1}, LAYOUT) is None  # logging is resume-safe
    _checkpoint(tmp_path, 4, ARGS)
    with pytest.raises(OutputDirError, match=r"other arguments \(--learning_rate 0.001 there, 0.002 now\)"):
        check_output_dir(tmp_path, {**ARGS, "learning_rate": 2e-3}, LAYOUT)
    with pytest.raises(OutputDirError, match="pass --resume to continue"):
        check_output_dir(tmp_path, ARGS, LAYOUT)
    (tmp_path / "final_model").mkdir()
    with pytest.raises(OutputDirError, match=r"holds a finished run \(final_model\)"):
        check_output_dir(tmp_path, ARGS, LAYOUT)
    assert check_output_dir(tmp_path, {**ARGS, "learning_rate": 2e-3}, LAYOUT, overwrite=True) is None
    (tmp_path / "run_args.json").unlink()
    with pytest.raises(OutputDirError, match="no run_args.json to compare with"):
        check_output_dir(tmp_path, ARGS, LAYOUT)


def test_resume_refuses_arguments_that_differ_from_the_checkpoints_run(tmp_path):
    checkpoint = _checkpoint(tmp_path, 4, ARGS)
    assert check_output_dir(tmp_path, {**ARGS, "logging_steps": 1}, LAYOUT, resume_from="latest") == checkpoint
    for changed in ({"learning_rate": 5e-4}, {"num_blocks": 4}):
        with pytest.raises(OutputDirError, match=f"Cannot resume: .*--{next(iter(changed))} "):
            check_output_dir(tmp_path, {**ARGS, **changed}, LAYOUT, resume_from="latest")
    # Another run's checkpoint, given by its path, is checked too.
    other = _checkpoint(tmp_path / "other", 2, {**ARGS, "num_blocks": 3})
    with pytest.raises(OutputDirError, match="--num_blocks 3 there, 2 now"):
        check_output_dir(tmp_path / "new", ARGS, LAYOUT, resume_from=str(other))
    with pytest.raises(OutputDirError, match="no complete checkpoint"):
        check_output_dir(tmp_path / "new", ARGS, LAYOUT, resume_from="latest")
    with pytest.raises(OutputDirError, match="pass one of them"):
        check_output_dir(tmp_path, ARGS, LAYOUT, resume_from="latest", overwrite=True)
    (tmp_path / "final_model").mkdir()
    inputs = {"--model_name_or_path": tmp_path / "final_model"}
    for overwrite in (True, False):  # the run would write over its input, and --overwrite_output_dir delete it
        with pytest.raises(OutputOverwritesInputError, match="--output_dir .* holds --model_name_or_path"):
            check_output_dir(tmp_path, ARGS, LAYOUT, overwrite=overwrite, inputs=inputs)


def test_a_folder_whose_run_stopped_before_training_does_not_block_a_run_with_other_arguments(tmp_path):
    """A run refused or failed after it claimed its folder, before it trained (no checkpoint, no logged step, no
    final output), must not block its own retry with the option fixed; what a run trained still blocks it."""
    (tmp_path / "run_args.json").write_text(json.dumps(ARGS))
    (tmp_path / "tokenizer").mkdir()  # prepared before training: a fresh run writes its own
    (tmp_path / "metrics.jsonl").write_text("")  # opened, nothing logged
    fixed = {**ARGS, "learning_rate": 2e-3}
    assert check_output_dir(tmp_path, fixed, LAYOUT) is None
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 1, "loss": 2.0}) + "\n")
    with pytest.raises(OutputDirError, match=r"other arguments \(--learning_rate 0.001 there, 0.002 now\)"):
        check_output_dir(tmp_path, fixed, LAYOUT)
    (tmp_path / "metrics.jsonl").unlink()
    _checkpoint(tmp_path, 1, ARGS)
    with pytest.raises(OutputDirError, match="other arguments"):
        check_output_dir(tmp_path, fixed, LAYOUT)


def test_an_output_dir_that_is_a_file_is_refused_before_any_work(tmp_path):
    (tmp_path / "out").write_text("a file")
    for overwrite in (False, True):
        with pytest.raises(OutputDirError, match=f"--output_dir {tmp_path / 'out'} is a file"):
            check_output_dir(tmp_path / "out", ARGS, LAYOUT, overwrite=overwrite)


def test_a_multi_process_launch_that_accelerate_sets_up_as_one_process_is_refused(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(RuntimeError, match="set ACCELERATE_USE_CPU=1"):
        check_launch(SimpleNamespace(num_processes=1), "examples/run_mlm.py")
    check_launch(SimpleNamespace(num_processes=2), "examples/run_mlm.py")


@pytest.mark.parametrize(
    "native, precision, warned", [(False, "bf16", True), (True, "bf16", False), (False, "no", False)]
)
def test_bf16_on_a_cpu_that_emulates_it_is_warned_about(monkeypatch, caplog, native, precision, warned):
    """bf16 autocast on a CPU that emulates bf16 is several times slower than fp32: the run says so and what to pass."""
    monkeypatch.setattr(runs, "cpu_has_native_bf16", lambda: native)
    Accelerator(cpu=True)  # sets up the state accelerate's logger needs
    accelerator = SimpleNamespace(mixed_precision=precision, device=torch.device("cpu"))
    with caplog.at_level("WARNING", logger=runs.__name__):
        assert warn_emulated_bf16(accelerator, "examples/run_qa.py") is warned
    assert ("Run examples/run_qa.py with --mixed_precision no" in caplog.text) is warned


# ---------------------------------------------------------------------------------------------------------------------
# Metrics log, non-finite guard, optimizer
# ---------------------------------------------------------------------------------------------------------------------


def test_a_run_ends_only_after_its_prepared_model_is_freed(monkeypatch):
    """With several processes the prepared model is a DDP wrapper holding the process group: destroyed after the
    group, with the GIL held, it can hang the process at exit. `end_run` frees it, reference cycles too, first."""
    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(torch.nn.Linear(2, 2))
    model.owners = [model]  # a reference cycle, as hooks and closures make in DDP
    prepared = weakref.ref(model)
    del model
    alive_when_the_group_ends = []
    monkeypatch.setattr(accelerator, "end_training", lambda: alive_when_the_group_ends.append(prepared() is not None))
    end_run(accelerator)
    assert alive_when_the_group_ends == [False]


def test_metrics_log_resumes_with_the_lines_its_checkpoint_saw(tmp_path):
    accelerator = Accelerator()
    path = tmp_path / "metrics.jsonl"
    log = MetricsLog(path, accelerator)
    for step in (1, 2, 3):
        log.log({"step": step, "loss": 1.0 / step})
    state = {"step": 3, "metrics_lines": log.lines}
    log.log({"step": 3, "eval_loss": 0.5})  # logged after the checkpoint, then the run was killed ...
    with path.open("a") as handle:
        handle.write('{"step": 4, "lo')  # ... while writing the next line
    assert [record["step"] for record in read_metrics(path)] == [1, 2, 3, 3]

    resumed = MetricsLog(path, accelerator, resume_state=state)
    assert resumed.lines == 3 and [record["step"] for record in read_metrics(path)] == [1, 2, 3]
    path.write_text('{"step": 1}\n{"step": 2, "lo\n{"step": 3}\n')
    with pytest.raises(ValueError, match=r"metrics.jsonl:2: not a JSON record"):
        MetricsLog(path, accelerator, resume_state=state)


def test_a_non_finite_loss_stops_training_but_a_step_fp16_skips_does_not(tmp_path):
    plain, fp16 = SimpleNamespace(scaler=None), SimpleNamespace(scaler=object())
    check_finite(plain, tmp_path, step=3, loss=2.5, grad_norm=torch.tensor(1.0))
    _checkpoint(tmp_path, 2, ARGS)
    for loss, grad_norm, what in ((float("nan"), 1.0, "loss is nan"), (2.5, float("inf"), "gradient norm is inf")):
        with pytest.raises(NonFiniteLossError, match=f"{what} at step 3.*last good checkpoint is .*step_2"):
            check_finite(plain, tmp_path, step=3, loss=loss, grad_norm=grad_norm)
    check_finite(fp16, tmp_path, step=3, loss=2.5, grad_norm=float("inf"))  # the scaler skips this step
    with pytest.raises(NonFiniteLossError):
        check_finite(fp16, tmp_path, step=3, loss=float("inf"), grad_norm=1.0)

    accelerator = Accelerator()
    _, _, scheduler = _linear_run(accelerator)
    before = scheduler.last_epoch
    step_scheduler(SimpleNamespace(optimizer_step_was_skipped=True), scheduler)  # no learning-rate step either
    assert scheduler.last_epoch == before


def test_no_weight_decay_on_biases_and_layer_norms():
    model = BlockBertForMaskedLM(tiny_config())
    decay, no_decay = create_optimizer(model, 1e-3, weight_decay=0.01).param_groups
    assert decay["weight_decay"] == 0.01 and no_decay["weight_decay"] == 0.0
    names = {id(parameter): name for name, parameter in model.named_parameters()}
    assert all(not names[id(p)].endswith("bias") and "LayerNorm" not in names[id(p)] for p in decay["params"])
    assert {names[id(p)] for p in no_decay["params"]} >= {"lm_head.bias", "roberta.embeddings.LayerNorm.weight"}
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))


# ---------------------------------------------------------------------------------------------------------------------
# Example scripts
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("script", sorted(path.name for path in (REPO_ROOT / "examples").glob("*.py")))
def test_every_example_script_prints_its_help(script, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", [script, "--help"])
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_path(str(REPO_ROOT / "examples" / script), run_name="__main__")
    assert exit_info.value.code == 0
    assert "usage:" in capsys.readouterr().out
