"""The pre-training run: `run_pretraining(PretrainingArguments)` trains (or resumes) a BlockBERT masked LM.

Each optimizer step takes `B` packed sequences (`tokens_per_batch = B x N`), split over processes and micro-batches;
its loss is the mean over all masked tokens of the global batch. AdamW with the paper's settings, a linear schedule
with warmup, gradient clipping, mixed precision via Accelerate. Dropout is seeded per (seed, step, process), and the
masks per sequence (`data.MaskingCollator`), so a resumed or 2-process run repeats a 1-process uninterrupted one.
Checkpoints, the metrics log, the guards and the optimizer come from `blockbert_hf.train.runs`.
"""

import contextlib
import time
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.logging import get_logger
from accelerate.utils import ProjectConfiguration, set_seed
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from ...saving import save_atomically, save_tokenizer, write_json_atomically
from ..model_card import mlm_model_card, write_model_card
from ..runs import (
    METRICS_FILE,
    MetricsLog,
    check_finite,
    check_launch,
    check_output_dir,
    checkpoint_to_resume,
    claim_output_dir,
    create_optimizer,
    create_scheduler,
    dropout_seed,
    enable_gradient_checkpointing,
    end_run,
    hub_repo_id,
    load_checkpoint,
    push_folder_to_hub,
    read_metrics,
    run_arguments,
    save_checkpoint,
    step_scheduler,
    trackers,
    warmup_steps,
    warn_emulated_bf16,
)
from .arguments import (
    FINAL_MODEL_DIR,
    PRETRAINING_OUTPUTS,
    RESULTS_FILE,
    PretrainingArguments,
    check_pretraining_arguments,
)
from .data import MaskingCollator, tokenize_and_pack, validation_collator
from .documents import check_document_boundary, load_training_data
from .evaluation import MaskedLMLoss, evaluate
from .model import (
    BatchGeometry,
    batch_geometry,
    build_model,
    check_model_options,
    freeze_parameters,
    prepare_tokenizer,
    with_sequence_length,
)


logger = get_logger(__name__)

SUMMARY_CONFIG_FIELDS = (
    "num_hidden_layers",
    "hidden_size",
    "num_attention_heads",
    "intermediate_size",
    "vocab_size",
    "max_sequence_length",
    "attention_pattern",
    "num_blocks",
    "block_size",
    "heads_per_shift",
)


@dataclass
class Progress:
    """What a checkpoint records about the run so far."""

    step: int = 0
    real_tokens_seen: int = 0
    train_seconds: float = 0.0


@dataclass
class LoggingWindow:
    """Training losses and speed since the last metrics record."""

    losses: list[float] = field(default_factory=list)
    tokens: int = 0
    seconds: float = 0.0


@dataclass
class PretrainingRun:
    """Everything a pre-training run works with, set up by `_set_up`."""

    args: PretrainingArguments
    accelerator: Accelerator
    geometry: BatchGeometry
    total_steps: int
    tokenizer: object
    model: torch.nn.Module  # prepared by Accelerate
    unwrapped: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: object
    loss: MaskedLMLoss
    train_data: object
    eval_data: object | None
    steps_per_epoch: int
    trained: dict  # which parameters train (`model.trained_parameters`)
    progress: Progress = field(default_factory=Progress)
    metrics: MetricsLog | None = None
    results: dict = field(default_factory=dict)  # what results.json records, once the run has finished

    @property
    def output_dir(self) -> Path:
        return Path(self.args.output_dir)


def run_pretraining(args: PretrainingArguments) -> dict:
    """Trains (or resumes) and returns the results written to `results.json`. The launch and the output folder are
    checked before any work (see `blockbert_hf.train.runs`)."""
    check_pretraining_arguments(args)
    check_document_boundary(args.document_boundary)
    args = with_sequence_length(args)  # recorded in run_args.json as resolved
    check_model_options(args)
    total_steps = args.training_steps()
    accelerator = Accelerator(
        mixed_precision=args.mixed_precision,
        log_with=trackers(args.report_to),
        project_config=ProjectConfiguration(project_dir=args.output_dir),
    )
    check_launch(accelerator, "examples/run_mlm.py")
    warn_emulated_bf16(accelerator, "examples/run_mlm.py")
    geometry = batch_geometry(
        args.tokens_per_batch, args.max_seq_length, accelerator.num_processes, args.per_device_train_batch_size
    )
    run_args = run_arguments(args)
    inputs = {
        "--model_name_or_path": args.model_name_or_path,
        "--tokenizer_name": args.tokenizer_name,
        "--config_name": args.config_name,
        "--train_files": args.train_files,
        "--validation_files": args.validation_files,
    }
    resume_from = check_output_dir(
        args.output_dir,
        run_args,
        PRETRAINING_OUTPUTS,
        resume_from=checkpoint_to_resume(args.resume, args.resume_from_checkpoint),
        overwrite=args.overwrite_output_dir,
        inputs=inputs,
    )
    claim_output_dir(accelerator, args.output_dir, run_args, PRETRAINING_OUTPUTS, overwrite=args.overwrite_output_dir)

    results = _run(args, run_args, accelerator, geometry, total_steps, resume_from)
    end_run(accelerator)  # after _run returned: no reference to the prepared model is left here
    return results


def _run(
    args: PretrainingArguments,
    run_args: dict,
    accelerator: Accelerator,
    geometry: BatchGeometry,
    total_steps: int,
    resume_from: Path | None,
) -> dict:
    """The run itself, from the prepared objects to `results.json`: they are all local to it."""
    resumed_run = resume_from.parent.parent if resume_from is not None else None  # RUN/checkpoints/step_K
    run = _set_up(args, accelerator, geometry, total_steps, resumed_run)
    trainer_state = load_checkpoint(accelerator, resume_from) if resume_from is not None else None
    if trainer_state is not None:
        run.progress = Progress(**{key: trainer_state[key] for key in asdict(run.progress)})
    run.metrics = MetricsLog(run.output_dir / METRICS_FILE, accelerator, trainer_state)
    tracker_config = {key: value for key, value in run_args.items() if isinstance(value, (int, float, str, bool))}
    accelerator.init_trackers("blockbert_mlm", config=tracker_config)
    _train(run)
    return _finish(run)


def _set_up(
    args: PretrainingArguments,
    accelerator: Accelerator,
    geometry: BatchGeometry,
    total_steps: int,
    resumed_run: Path | None,
) -> PretrainingRun:
    """Data, tokenizer, model (the same initial weights in every process), optimizer and schedule."""
    train_documents, validation_documents = load_training_data(args)
    tokenizer = prepare_tokenizer(args, train_documents, accelerator, trained_in=resumed_run)
    set_seed(args.seed)
    model = build_model(args, tokenizer)
    if args.gradient_checkpointing:
        enable_gradient_checkpointing(model)
    trained = freeze_parameters(model, args)  # before the optimizer and DDP see the parameters
    train_data = tokenize_and_pack(train_documents, tokenizer, args.max_seq_length)
    eval_data = None
    if validation_documents:
        eval_data = tokenize_and_pack(validation_documents, tokenizer, args.max_seq_length)
        if args.max_eval_sequences:
            eval_data = eval_data.select(range(min(args.max_eval_sequences, len(eval_data))))
    steps_per_epoch = len(train_data) // geometry.sequences_per_step
    if steps_per_epoch == 0:
        raise ValueError(
            f"The training data packs into {len(train_data)} sequences of N = {args.max_seq_length}, fewer than one "
            f"batch of B = {geometry.sequences_per_step}: lower tokens_per_batch or add data."
        )
    betas = (args.adam_beta1, args.adam_beta2)
    optimizer = create_optimizer(model, args.learning_rate, args.weight_decay, betas, args.adam_epsilon)
    warmup = warmup_steps(total_steps, args.warmup_ratio, args.num_warmup_steps)
    scheduler = create_scheduler(accelerator, optimizer, total_steps, warmup)
    loss = MaskedLMLoss(model)
    prepared, optimizer = accelerator.prepare(model, optimizer)
    return PretrainingRun(
        args, accelerator, geometry, total_steps, tokenizer, prepared, accelerator.unwrap_model(prepared),
        optimizer, scheduler, loss, train_data, eval_data, steps_per_epoch, trained,
    )  # fmt: skip


def _epoch_batches(run: PretrainingRun, epoch: int, step_in_epoch: int):
    """The micro-batches of an epoch (its own shuffle and masks), from the step a resumed run continues at."""
    args, accelerator = run.args, run.accelerator
    order = torch.randperm(len(run.train_data), generator=torch.Generator().manual_seed(args.seed + epoch))
    epoch_data = run.train_data.select(order[: run.steps_per_epoch * run.geometry.sequences_per_step].tolist())
    collator = MaskingCollator(run.tokenizer, args.seed, epoch, args.mlm_probability)
    loader = accelerator.prepare(
        DataLoader(epoch_data, batch_size=run.geometry.micro_batch, shuffle=False, collate_fn=collator)
    )
    if step_in_epoch:
        loader = accelerator.skip_first_batches(loader, step_in_epoch * run.geometry.accumulation_steps)
    return iter(loader)


def _train(run: PretrainingRun) -> None:
    args = run.args
    last_step = min(run.total_steps, args.stop_after_step or run.total_steps)
    bar = tqdm(
        total=run.total_steps,
        initial=run.progress.step,
        disable=not run.accelerator.is_local_main_process,
        desc="pre-training",
        unit="step",
    )
    window = LoggingWindow()
    if args.eval_before_training and run.progress.step == 0 and run.eval_data is not None:
        run.metrics.log({"step": 0, **_evaluate(run)})
    run.model.train()
    while run.progress.step < last_step:
        epoch, step_in_epoch = divmod(run.progress.step, run.steps_per_epoch)
        batches = _epoch_batches(run, epoch, step_in_epoch)
        while step_in_epoch < run.steps_per_epoch and run.progress.step < last_step:
            started = time.perf_counter()
            micro_batches = [next(batches) for _ in range(run.geometry.accumulation_steps)]
            loss, grad_norm, real_tokens = _train_step(run, micro_batches)
            step_in_epoch += 1
            run.progress.step += 1
            run.progress.real_tokens_seen += real_tokens
            seconds = time.perf_counter() - started
            run.progress.train_seconds += seconds
            window.losses.append(loss)
            window.tokens += real_tokens
            window.seconds += seconds
            bar.update(1)
            bar.set_postfix(loss=f"{loss:.3f}")
            window = _log_evaluate_save(run, epoch, step_in_epoch, window, grad_norm)
    bar.close()


def _train_step(run: PretrainingRun, micro_batches: list[dict]) -> tuple[float, float, int]:
    """One optimizer step over the micro-batches; returns (global loss, gradient norm, real tokens)."""
    accelerator, model = run.accelerator, run.model
    torch.manual_seed(dropout_seed(run.args.seed, run.progress.step, accelerator.process_index))
    local_count = sum((batch["labels"] != -100).sum() for batch in micro_batches)
    global_count = accelerator.reduce(local_count.to(accelerator.device), reduction="sum").clamp(min=1)
    loss_sum = torch.zeros((), device=accelerator.device)
    for index, batch in enumerate(micro_batches):
        last = index == len(micro_batches) - 1
        with contextlib.nullcontext() if last else accelerator.no_sync(model):
            loss = run.loss(model, batch, num_items_in_batch=global_count)
            # DDP averages gradients over processes; the loss is a mean over the global batch's masked tokens.
            accelerator.backward(loss * accelerator.num_processes)
        loss_sum += loss.detach()
    loss = accelerator.reduce(loss_sum, reduction="sum").item()
    grad_norm = accelerator.clip_grad_norm_(model.parameters(), run.args.max_grad_norm)
    check_finite(accelerator, run.output_dir, run.progress.step + 1, loss, grad_norm)  # before the step applies it
    run.optimizer.step()
    step_scheduler(accelerator, run.scheduler)
    run.optimizer.zero_grad(set_to_none=True)
    real_tokens = sum(batch["attention_mask"].sum() for batch in micro_batches).to(accelerator.device)
    return loss, float(grad_norm), int(accelerator.reduce(real_tokens, reduction="sum").item())


def _log_evaluate_save(
    run: PretrainingRun, epoch: int, step_in_epoch: int, window: LoggingWindow, grad_norm: float
) -> LoggingWindow:
    """The metrics record, evaluation and checkpoint due after a step; returns the (maybe new) logging window."""
    args, step, progress = run.args, run.progress.step, run.progress
    if step % args.logging_steps == 0 or step == run.total_steps:
        record = {
            "step": step,
            "epoch": epoch,
            "loss": sum(window.losses) / len(window.losses),
            "last_loss": window.losses[-1],
            "lr": run.scheduler.get_last_lr()[0],
            "grad_norm": grad_norm,
            "real_tokens_seen": progress.real_tokens_seen,
            "tokens_per_second": window.tokens / window.seconds,
            "train_seconds": progress.train_seconds,
        }
        run.metrics.log(record)
        window = LoggingWindow()
    if run.eval_data is not None and args.eval_steps and step % args.eval_steps == 0 and step != run.total_steps:
        run.metrics.log({"step": step, **_evaluate(run)})
    if args.checkpointing_steps and step % args.checkpointing_steps == 0:
        trainer_state = {
            **asdict(progress),
            "epoch": epoch,
            "step_in_epoch": step_in_epoch,
            "metrics_lines": run.metrics.lines,
            "run_args": run_arguments(args),
        }
        save_checkpoint(run.accelerator, run.output_dir, step, trainer_state, args.save_total_limit)
    return window


def _evaluate(run: PretrainingRun) -> dict[str, float]:
    collator = validation_collator(run.tokenizer, run.args.mlm_probability)
    return evaluate(run.unwrapped, run.eval_data, collator, run.accelerator, run.args.per_device_eval_batch_size)


def _summary(run: PretrainingRun) -> dict:
    progress, config = run.progress, run.unwrapped.config
    model = {key: getattr(config, key) for key in SUMMARY_CONFIG_FIELDS}
    model["block_size"] = config.effective_block_size  # in use, also where the config leaves it unset (from N and n)
    return {
        "total_steps": run.total_steps,
        "tokens_per_batch": run.args.tokens_per_batch,
        "train_tokens": run.total_steps * run.args.tokens_per_batch,
        "real_tokens_seen": progress.real_tokens_seen,
        "train_seconds": progress.train_seconds,
        "tokens_per_second": progress.real_tokens_seen / max(progress.train_seconds, 1e-9),
        "num_processes": run.accelerator.num_processes,
        "train_sequences": len(run.train_data),
        "eval_sequences": len(run.eval_data) if run.eval_data is not None else 0,
        "parameters": run.unwrapped.num_parameters(),
        **run.trained,
        "model": model,
        "seed": run.args.seed,
    }


def _finish(run: PretrainingRun) -> dict:
    """At the end of the schedule: final evaluation, `final_model/` (model, tokenizer, model card) and
    `results.json`."""
    accelerator = run.accelerator
    results = {"step": run.progress.step, "finished": run.progress.step >= run.total_steps}
    if results["finished"]:
        if run.eval_data is not None:
            final = _evaluate(run)
            run.metrics.log({"step": run.progress.step, **final})
            results.update(final)
        results.update(_summary(run))
        run.results = results
        accelerator.wait_for_everyone()
        run.unwrapped.config.sparse_prediction = False  # a training-time setting: the saved model returns all logits
        if accelerator.is_main_process:
            save_final_model(run)
            write_json_atomically(run.output_dir / RESULTS_FILE, results)
            logger.info(f"Saved the final model to {run.output_dir / FINAL_MODEL_DIR}.")
            if run.args.push_to_hub:  # the finished folder, as saved
                repo_id = hub_repo_id(run.args.hub_model_id, run.args.output_dir)
                results["hub_repo_id"] = push_folder_to_hub(run.output_dir / FINAL_MODEL_DIR, repo_id)
    accelerator.wait_for_everyone()
    return results


def save_final_model(run: PretrainingRun) -> Path:
    """`final_model/`: the model, its tokenizer and its model card (`README.md`), in one atomic folder."""

    def write_card(folder: Path) -> None:
        training_log = read_metrics(run.output_dir / METRICS_FILE)
        card = mlm_model_card(run.args, run.unwrapped.config, run.accelerator, run.results, training_log)
        write_model_card(card, folder)

    return save_atomically(
        run.output_dir / FINAL_MODEL_DIR,
        run.unwrapped.save_pretrained,
        partial(save_tokenizer, run.tokenizer),
        write_card,
    )
