"""The fine-tuning loop of a QA run: batches in a seeded order per epoch, the loss (the window or per-block
objective, mixed with task distillation's), checkpoints for exact resume, and the saved model with its card."""

import hashlib
import math
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import datasets
import torch
from accelerate import Accelerator
from accelerate.logging import get_logger
from torch.utils.data import DataLoader
from tqdm.auto import tqdm
from transformers import AutoModelForQuestionAnswering
from transformers.trainer_pt_utils import LengthGroupedSampler

from ...saving import save_atomically, save_tokenizer
from ..model_card import qa_model_card, write_model_card
from ..runs import (
    METRICS_FILE,
    MetricsLog,
    check_finite,
    create_optimizer,
    create_scheduler,
    dropout_seed,
    load_checkpoint,
    read_metrics,
    save_checkpoint,
    step_scheduler,
    warmup_steps,
)
from .arguments import MODEL_DIR, QARunConfig, _checkpoint_every
from .objective import per_block_span_loss
from .task_distillation import TeacherLogits, span_distillation_loss


logger = get_logger(__name__)

FEATURE_INDEX = "window_index"  # the training windows' column that finds their teacher logits (task distillation)


def batch_order_seed(seed: int, epoch: int) -> int:
    """The seed of the batch order of one epoch: distinct for every (seed, epoch) pair, so that no two seeds of a
    recipe share an epoch's order (`seed + epoch` would give seed 1's first epoch the order of seed 0's second)."""
    return int.from_bytes(hashlib.sha256(f"batch-order:{seed}:{epoch}".encode()).digest()[:8], "big")


def _train_dataloader(config: QARunConfig, features: datasets.Dataset, collator) -> tuple[DataLoader, torch.Generator]:
    """Shuffled batches, or with `group_by_length` batches of similar lengths (transformers' LengthGroupedSampler:
    random mega-batches sorted by length), which pad far less. The generator is reseeded every epoch, so a resumed
    run sees the same order."""
    generator = torch.Generator()
    if config.group_by_length:
        lengths = [len(input_ids) for input_ids in features["input_ids"]]
        sampler = LengthGroupedSampler(config.per_device_train_batch_size, lengths=lengths, generator=generator)
    else:
        sampler = torch.utils.data.RandomSampler(features, generator=generator)
    loader = DataLoader(features, sampler=sampler, collate_fn=collator, batch_size=config.per_device_train_batch_size)
    return loader, generator


@dataclass
class _Training:
    """The prepared objects and the schedule of a fine-tuning run."""

    config: QARunConfig
    accelerator: Accelerator
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: object
    dataloader: DataLoader
    generator: torch.Generator
    steps_per_epoch: int
    max_train_steps: int
    num_epochs: int
    metrics: MetricsLog | None = None
    completed_steps: int = 0
    logged_losses: list[float] = field(default_factory=list)  # the step losses since the last metrics record
    grad_norms: list[float] = field(default_factory=list)  # and the gradient norms, before any clipping
    run_args: dict = field(default_factory=dict)  # what checkpoints record of the run (`_run_record`)
    distillation: "_Distillation | None" = None  # task distillation (`--teacher_model_name_or_path`)
    objective_block_size: int | None = None  # the blocks of the per-block objective; None: the window objective


def _objective_block_size(summary: dict) -> int | None:
    """The block size of the per-block objective, or None for the window objective (the model's own loss)."""
    return summary["window_block_size"] if summary["qa_objective"] == "per_block" else None


def _outputs_and_loss(model, batch: dict, block_size: int | None, distillation: "_Distillation | None" = None):
    """The model's outputs on `batch` and the loss of its labels: the model's own (one softmax over the window) when
    `block_size` is None, else the per-block objective over blocks of `block_size` (`per_block_span_loss`); with
    `distillation`, mixed with the distillation loss over the same softmaxes (`span_distillation_loss`)."""
    batch = dict(batch)
    windows = batch.pop(FEATURE_INDEX, None)
    if block_size is None:
        outputs = model(**batch)
        loss = outputs.loss
    else:
        labels = ("start_positions", "end_positions")
        outputs = model(**{name: value for name, value in batch.items() if name not in labels})
        loss = per_block_span_loss(
            outputs.start_logits, outputs.end_logits, *(batch[name] for name in labels), block_size,
            batch.get("attention_mask"),
        )  # fmt: skip
    if distillation is not None:
        length = outputs.start_logits.shape[1]
        teacher_start, teacher_end = distillation.logits.batch(windows, length, outputs.start_logits.device)
        kd = span_distillation_loss(
            outputs.start_logits, outputs.end_logits, teacher_start, teacher_end, batch.get("attention_mask"),
            distillation.temperature, block_size,
        )  # fmt: skip
        loss = distillation.alpha * kd + (1 - distillation.alpha) * loss
    return outputs, loss


@dataclass
class _Distillation:
    logits: TeacherLogits
    temperature: float
    alpha: float


def _teacher_logits(config: QARunConfig, accelerator: Accelerator, features, collator, block_size) -> TeacherLogits:
    """The teacher's logits over the training windows: read from `--teacher_logits` where it exists, else computed
    with `--teacher_model_name_or_path` (and written to `--teacher_logits` when given)."""
    if config.teacher_logits and Path(config.teacher_logits).is_file():
        logger.info(f"Teacher logits read from {config.teacher_logits}.")
        return TeacherLogits.load(config.teacher_logits, features, block_size)
    teacher = AutoModelForQuestionAnswering.from_pretrained(
        config.teacher_model_name_or_path, trust_remote_code=config.trust_remote_code
    )
    logits = TeacherLogits.compute(
        teacher, features, collator, block_size, config.per_device_eval_batch_size, accelerator.device
    )
    if config.teacher_logits and accelerator.is_main_process:
        logits.save(config.teacher_logits)
        logger.info(f"Teacher logits written to {config.teacher_logits}.")
    return logits


def _set_up_training(config: QARunConfig, accelerator: Accelerator, model, dataloader, generator) -> _Training:
    optimizer = create_optimizer(model, config.learning_rate, config.weight_decay)
    model, optimizer, dataloader = accelerator.prepare(model, optimizer, dataloader)
    steps_per_epoch = math.ceil(len(dataloader) / config.gradient_accumulation_steps)
    max_train_steps = config.max_train_steps or math.ceil(config.num_train_epochs * steps_per_epoch)
    warmup = warmup_steps(max_train_steps, config.warmup_ratio)
    scheduler = create_scheduler(accelerator, optimizer, max_train_steps, warmup)
    num_epochs = math.ceil(max_train_steps / steps_per_epoch)
    return _Training(
        config, accelerator, model, optimizer, scheduler, dataloader, generator,
        steps_per_epoch, max_train_steps, num_epochs,
    )  # fmt: skip


def _train(training: _Training, resume_from: Path | None, summary: dict, after_epoch=None) -> None:
    """The training loop: resumes where `resume_from` stopped, stops at `max_train_steps` (checked before a step).
    `after_epoch(epoch)`, when given, runs after every epoch but the last (an evaluation)."""
    config, accelerator = training.config, training.accelerator
    state = load_checkpoint(accelerator, resume_from) if resume_from is not None else None
    training.completed_steps = state["step"] if state is not None else 0
    training.metrics = MetricsLog(Path(config.output_dir) / METRICS_FILE, accelerator, state)
    first_epoch, steps_into_epoch = divmod(training.completed_steps, training.steps_per_epoch)
    if state is not None:
        logger.info(f"Resumed from {resume_from} after {training.completed_steps} steps.")
    summary.update(
        num_epochs=training.num_epochs, max_train_steps=training.max_train_steps, learning_rate=config.learning_rate
    )
    logger.info(
        f"Training: {summary['train_features']} windows, {training.num_epochs} epoch(s), {training.max_train_steps} "
        f"steps of {config.per_device_train_batch_size} x {accelerator.num_processes} process(es) x "
        f"{config.gradient_accumulation_steps} accumulation."
    )
    bar = tqdm(
        total=training.max_train_steps,
        initial=training.completed_steps,
        desc="Training",
        disable=not accelerator.is_local_main_process,
    )
    started = time.perf_counter()
    for epoch in range(first_epoch, training.num_epochs):
        if training.completed_steps >= training.max_train_steps:
            break
        training.model.train()
        training.generator.manual_seed(batch_order_seed(config.seed, epoch))
        batches = training.dataloader
        if epoch == first_epoch and steps_into_epoch:
            skip = steps_into_epoch * config.gradient_accumulation_steps
            batches = accelerator.skip_first_batches(training.dataloader, skip)
        _train_epoch(training, epoch, batches, bar)
        if after_epoch is not None and training.completed_steps < training.max_train_steps:
            after_epoch(epoch)
        if config.checkpointing_steps == "epoch":
            _save(training, epoch)
    bar.close()
    summary.update(completed_steps=training.completed_steps, train_seconds=round(time.perf_counter() - started, 1))


def _train_epoch(training: _Training, epoch: int, batches, bar) -> None:
    config, accelerator, model = training.config, training.accelerator, training.model
    checkpoint_every = _checkpoint_every(config.checkpointing_steps)
    step_losses = []
    for batch in batches:
        if training.completed_steps >= training.max_train_steps:
            break
        micro_batch = len(step_losses)
        torch.manual_seed(dropout_seed(config.seed, training.completed_steps, accelerator.process_index, micro_batch))
        with accelerator.accumulate(model):
            _, loss = _outputs_and_loss(model, batch, training.objective_block_size, training.distillation)
            accelerator.backward(loss)
            step_losses.append(loss.detach().float())
            if accelerator.sync_gradients:  # the last micro-batch of a step: check the loss before the update
                step_loss = accelerator.reduce(torch.stack(step_losses).mean(), reduction="mean").item()
                check_finite(accelerator, config.output_dir, training.completed_steps + 1, step_loss)
                # The norm before clipping, logged either way (an infinite bound leaves the gradients as they are).
                bound = config.max_grad_norm if config.max_grad_norm is not None else math.inf
                training.grad_norms.append(float(accelerator.clip_grad_norm_(model.parameters(), bound)))
            training.optimizer.step()
            if accelerator.sync_gradients:
                step_scheduler(accelerator, training.scheduler)
            training.optimizer.zero_grad()
        if not accelerator.sync_gradients:
            continue
        training.completed_steps += 1
        training.logged_losses.append(step_loss)
        step_losses = []
        bar.update(1)
        if training.completed_steps % config.logging_steps == 0:
            lr, loss = training.scheduler.get_last_lr()[0], sum(training.logged_losses) / len(training.logged_losses)
            grad_norm = max(training.grad_norms)  # the largest since the last line, so that a spike shows
            bar.set_postfix(loss=f"{loss:.4f}")
            step = training.completed_steps
            training.metrics.log({"step": step, "epoch": epoch, "loss": loss, "lr": lr, "grad_norm_max": grad_norm})
            logger.info(f"step {step}: loss {loss:.4f}, lr {lr:.2e}, gradient norm up to {grad_norm:.2f}")
            training.logged_losses, training.grad_norms = [], []
        if isinstance(checkpoint_every, int) and training.completed_steps % checkpoint_every == 0:
            _save(training, epoch)


def _save(training: _Training, epoch: int) -> None:
    trainer_state = {
        "epoch": epoch,
        "metrics_lines": training.metrics.lines,
        "run_args": training.run_args,
    }
    config = training.config
    save_checkpoint(
        training.accelerator, config.output_dir, training.completed_steps, trainer_state, config.save_total_limit
    )


def _save_model(config: QARunConfig, accelerator: Accelerator, model, tokenizer, summary: dict) -> None:
    """`output_dir/model`: the fine-tuned model, its tokenizer and its model card, in one atomic folder."""
    accelerator.wait_for_everyone()
    state_dict = accelerator.get_state_dict(model)
    if accelerator.is_main_process:
        unwrapped = accelerator.unwrap_model(model)
        model_dir = save_atomically(
            Path(config.output_dir) / MODEL_DIR,
            lambda folder: unwrapped.save_pretrained(folder, state_dict=state_dict),
            partial(save_tokenizer, tokenizer),
            lambda folder: _write_model_card(config, accelerator, unwrapped.config, folder, summary),
        )
        logger.info(f"Saved the fine-tuned model to {model_dir}.")


def _write_model_card(config: QARunConfig, accelerator: Accelerator, model_config, folder: Path, results) -> None:
    """The card of the fine-tuned model (`README.md`), with the run's evaluation once it has one."""
    training_log = read_metrics(Path(config.output_dir) / METRICS_FILE)
    write_model_card(qa_model_card(config, model_config, accelerator, results, training_log), folder)
