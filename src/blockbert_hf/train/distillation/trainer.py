"""The self-distillation run: `run_distillation(DistillationArguments)` trains (or resumes) a blockwise BlockBERT to
reproduce its full-attention self (`objective`), with the run folder of `examples/run_mlm.py`.

Each optimizer step takes `B` packed sequences (`tokens_per_batch = B x N`), split over processes and micro-batches.
The batch of a step is a function of the step alone (its epoch's shuffle, seeded by (seed, epoch), and its place in
it), and dropout is seeded per (seed, step, micro-batch, process), so a resumed run repeats an uninterrupted one
exactly. Every `short_batch_every`-th step reads sequences of the teacher's N, where its targets need no windows.
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
from tqdm.auto import tqdm
from transformers import AutoTokenizer, DataCollatorWithPadding

from ...model.configuration_blockbert import BlockBertConfig
from ...model.modeling_blockbert import BlockBertModel
from ...saving import save_atomically, save_tokenizer, write_json_atomically
from ..model_card import distillation_model_card, write_model_card
from ..pretraining.data import tokenize_and_pack
from ..pretraining.documents import check_document_boundary, load_training_data
from ..pretraining.model import batch_geometry
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
    end_run,
    load_checkpoint,
    read_metrics,
    run_arguments,
    save_checkpoint,
    step_scheduler,
    trackers,
    warmup_steps,
)
from .arguments import (
    DISTILLATION_OUTPUTS,
    DISTILLED_MODEL_DIR,
    RESULTS_FILE,
    DistillationArguments,
    check_distillation_arguments,
)
from .objective import combined_loss, layer_losses, parse_layer_weights, sliding_window_hidden_states


logger = get_logger(__name__)


def load_teacher_and_student(args: DistillationArguments) -> tuple[BlockBertModel, BlockBertModel]:
    """The teacher (the checkpoint with full attention, at the N its positions allow, frozen, in eval mode) and the
    student (the checkpoint as it is, with the run's dropout). Raises a `ValueError` for a checkpoint that is not
    blockwise (there is nothing to distil) or an `--max_seq_length` other than the student's N."""
    overrides = {
        name: getattr(args, name)
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob")
        if getattr(args, name) is not None
    }
    model_type = BlockBertConfig.get_config_dict(args.model_name_or_path)[0].get("model_type")
    if model_type != BlockBertConfig.model_type:
        raise ValueError(
            f"{args.model_name_or_path} is a {model_type} checkpoint, not a BlockBERT one: convert it first "
            "(examples/convert_roberta_to_blockbert.py --num_blocks 2 ...); its full attention is then the teacher."
        )
    student = BlockBertModel.from_pretrained(
        args.model_name_or_path, add_pooling_layer=False, attn_implementation=args.attn_implementation, **overrides
    )
    if student.config.attention_pattern != "blockwise" or student.config.num_blocks == 1:
        raise ValueError(
            f"{args.model_name_or_path} computes full attention (attention_pattern={student.config.attention_pattern!r}"
            f", num_blocks={student.config.num_blocks}): it is its own teacher. Convert it with --num_blocks 2 (or "
            "more) first (examples/convert_roberta_to_blockbert.py)."
        )
    n = student.config.max_sequence_length
    if args.max_seq_length not in (None, n):
        raise ValueError(f"{args.model_name_or_path} has N = {n} but --max_seq_length is {args.max_seq_length}.")
    teacher = BlockBertModel.from_pretrained(
        args.model_name_or_path,
        add_pooling_layer=False,
        attn_implementation=args.attn_implementation,
        attention_pattern="full",
        block_relative_positions=False,
    ).eval()
    teacher.requires_grad_(False)
    if not args.train_embeddings:
        student.embeddings.requires_grad_(False)
    return teacher, student


@dataclass
class Progress:
    """What a checkpoint records about the run so far."""

    step: int = 0
    real_tokens_seen: int = 0
    train_seconds: float = 0.0


@dataclass
class Stream:
    """The packed sequences of one length and how a step reads them."""

    data: object  # a datasets.Dataset of packed sequences
    geometry: object  # BatchGeometry
    window: int  # the teacher's N: the length of its windows

    @property
    def steps_per_epoch(self) -> int:
        return len(self.data) // self.geometry.sequences_per_step

    def step_batch(self, seed: int, index: int, process_index: int) -> list[int]:
        """The sequences this process reads in the `index`-th step of this stream (its epoch's shuffle, its place)."""
        epoch, position = divmod(index, self.steps_per_epoch)
        order = torch.randperm(len(self.data), generator=torch.Generator().manual_seed(seed * 1_000_003 + epoch))
        size = self.geometry.sequences_per_step
        chosen = order[position * size : (position + 1) * size].tolist()
        return chosen[process_index :: self.geometry.num_processes]


@dataclass
class DistillationRun:
    args: DistillationArguments
    accelerator: Accelerator
    total_steps: int
    tokenizer: object
    teacher: BlockBertModel
    model: torch.nn.Module  # the student, prepared by Accelerate
    unwrapped: BlockBertModel
    optimizer: torch.optim.Optimizer
    scheduler: object
    long: Stream
    short: Stream | None
    eval_data: object | None
    collator: object
    layer_weights: list[float]
    progress: Progress = field(default_factory=Progress)
    metrics: MetricsLog | None = None
    results: dict = field(default_factory=dict)

    @property
    def output_dir(self) -> Path:
        return Path(self.args.output_dir)

    def stream_of_step(self, step: int) -> tuple[Stream, int]:
        """The stream step `step` (0-based) reads, and how many steps of that stream came before it."""
        every = self.args.short_batch_every
        if self.short is None or not every:
            return self.long, step
        short_steps_before = step // every  # steps K - 1, 2K - 1, ... (0-based) are short
        if (step + 1) % every == 0:
            return self.short, short_steps_before
        return self.long, step - short_steps_before


def run_distillation(args: DistillationArguments) -> dict:
    """Trains (or resumes) and returns the results written to `results.json`. The options, the launch and the output
    folder are checked before any work."""
    check_distillation_arguments(args)
    check_document_boundary(args.document_boundary)
    total_steps = args.training_steps()
    accelerator = Accelerator(log_with=trackers(args.report_to), project_config=ProjectConfiguration(args.output_dir))
    check_launch(accelerator, "examples/distill_blockbert.py")
    run_args = run_arguments(args)
    inputs = {"--model_name_or_path": args.model_name_or_path, "--train_files": args.train_files}
    inputs["--validation_files"] = args.validation_files
    resume_from = check_output_dir(
        args.output_dir,
        run_args,
        DISTILLATION_OUTPUTS,
        resume_from=checkpoint_to_resume(args.resume, args.resume_from_checkpoint),
        overwrite=args.overwrite_output_dir,
        inputs=inputs,
    )
    teacher, student = load_teacher_and_student(args)  # model errors before the output folder is claimed
    layer_weights = parse_layer_weights(args.layer_weights, student.config.num_hidden_layers)
    claim_output_dir(accelerator, args.output_dir, run_args, DISTILLATION_OUTPUTS, overwrite=args.overwrite_output_dir)
    run = _set_up(args, accelerator, total_steps, teacher, student, layer_weights)
    state = load_checkpoint(accelerator, resume_from) if resume_from is not None else None
    if state is not None:
        run.progress = Progress(**{key: state[key] for key in asdict(run.progress)})
    run.metrics = MetricsLog(run.output_dir / METRICS_FILE, accelerator, state)
    accelerator.init_trackers("blockbert_distillation", config={k: v for k, v in run_args.items() if _is_scalar(v)})
    _train(run)
    results = _finish(run)
    end_run(accelerator)
    return results


def _is_scalar(value) -> bool:
    return isinstance(value, (int, float, str, bool))


def _set_up(args, accelerator, total_steps: int, teacher, student, layer_weights: list[float]) -> DistillationRun:
    train_documents, validation_documents = load_training_data(args)
    tokenizer = AutoTokenizer.from_pretrained(args.model_name_or_path)
    n, window = student.config.max_sequence_length, teacher.config.max_sequence_length
    processes = accelerator.num_processes

    def stream(seq_len: int) -> Stream:
        geometry = batch_geometry(args.tokens_per_batch, seq_len, processes, args.per_device_train_batch_size)
        found = Stream(tokenize_and_pack(train_documents, tokenizer, seq_len), geometry, window)
        if found.steps_per_epoch == 0:
            raise ValueError(
                f"The training data packs into {len(found.data)} sequences of N = {seq_len}, fewer than one batch of "
                f"B = {geometry.sequences_per_step}: lower --tokens_per_batch or add data."
            )
        return found

    long = stream(n)
    short = stream(window) if args.short_batch_every and window < n else None
    eval_data = None
    if validation_documents:
        eval_data = tokenize_and_pack(validation_documents, tokenizer, n)
        if args.max_eval_sequences:
            eval_data = eval_data.select(range(min(args.max_eval_sequences, len(eval_data))))
    set_seed(args.seed)
    optimizer = create_optimizer(student, args.learning_rate, args.weight_decay)
    scheduler = create_scheduler(accelerator, optimizer, total_steps, warmup_steps(total_steps, args.warmup_ratio))
    prepared, optimizer = accelerator.prepare(student, optimizer)
    teacher.to(accelerator.device)
    collator = DataCollatorWithPadding(tokenizer)
    return DistillationRun(
        args, accelerator, total_steps, tokenizer, teacher, prepared, accelerator.unwrap_model(prepared),
        optimizer, scheduler, long, short, eval_data, collator, layer_weights,
    )  # fmt: skip


def _collate(run: DistillationRun, data, indices: list[int]) -> dict:
    rows = [{"input_ids": data[index]["input_ids"]} for index in indices]
    return {name: value.to(run.accelerator.device) for name, value in run.collator(rows).items()}


def _losses(run: DistillationRun, model, batch: dict, window: int) -> dict[str, torch.Tensor]:
    is_real = batch["attention_mask"].bool()
    targets = sliding_window_hidden_states(
        run.teacher, batch["input_ids"], batch["attention_mask"], window, window // 2
    )
    states = model(**batch, output_hidden_states=True).hidden_states
    return layer_losses(states, targets, is_real)


def _train_step(run: DistillationRun) -> tuple[float, dict[str, float], float, int]:
    """One optimizer step; returns (loss, its parts, gradient norm, real tokens), averaged over the processes."""
    accelerator, args, step = run.accelerator, run.args, run.progress.step
    stream, index = run.stream_of_step(step)
    indices = stream.step_batch(args.seed, index, accelerator.process_index)
    micro = stream.geometry.micro_batch
    chunks = [indices[start : start + micro] for start in range(0, len(indices), micro)]
    totals: dict[str, float] = {}
    real_tokens = 0
    for position, chunk in enumerate(chunks):
        torch.manual_seed(dropout_seed(args.seed, step, accelerator.process_index, position))
        batch = _collate(run, stream.data, chunk)
        real_tokens += int(batch["attention_mask"].sum())
        sync = position == len(chunks) - 1
        with contextlib.nullcontext() if sync else accelerator.no_sync(run.model):
            parts = _losses(run, run.model, batch, stream.window)
            loss = combined_loss(parts, run.layer_weights, args.cosine_weight) / len(chunks)
            accelerator.backward(loss)
        for name, value in {"loss": loss * len(chunks), **parts}.items():
            totals[name] = totals.get(name, 0.0) + float(value.detach()) / len(chunks)
    means = {
        name: float(accelerator.reduce(torch.tensor(value, device=accelerator.device), "mean"))
        for name, value in totals.items()
    }
    grad_norm = float(accelerator.clip_grad_norm_(run.model.parameters(), args.max_grad_norm))
    check_finite(accelerator, run.output_dir, step + 1, means["loss"], grad_norm)  # before the step applies it
    run.optimizer.step()
    step_scheduler(accelerator, run.scheduler)
    run.optimizer.zero_grad(set_to_none=True)
    tokens = int(accelerator.reduce(torch.tensor(real_tokens, device=accelerator.device), "sum"))
    return means.pop("loss"), means, grad_norm, tokens


@torch.no_grad()
def evaluate(run: DistillationRun) -> dict[str, float]:
    """The held-out losses of the student (eval mode): each layer's normalised MSE, the last layer's cosine distance
    and their combination, each a mean over the evaluation batches."""
    model, data, size = run.unwrapped, run.eval_data, run.args.per_device_eval_batch_size
    was_training = model.training
    model.eval()
    totals, batches = {}, 0
    for start in range(0, len(data), size):
        batch = _collate(run, data, list(range(start, min(start + size, len(data)))))
        parts = _losses(run, model, batch, run.long.window)
        parts["loss"] = combined_loss(parts, run.layer_weights, run.args.cosine_weight)
        for name, value in parts.items():
            totals[name] = totals.get(name, 0.0) + float(value)
        batches += 1
    model.train(was_training)
    return {f"eval_{name}": value / batches for name, value in totals.items()}


def _train(run: DistillationRun) -> None:
    args = run.args
    last_step = min(run.total_steps, args.stop_after_step or run.total_steps)
    if args.eval_before_training and run.progress.step == 0 and run.eval_data is not None:
        run.metrics.log({"step": 0, **evaluate(run)})
    bar = tqdm(total=run.total_steps, initial=run.progress.step, desc="distilling", unit="step",
               disable=not run.accelerator.is_local_main_process)  # fmt: skip
    run.model.train()
    window: list[tuple[float, dict, float, int, float]] = []
    while run.progress.step < last_step:
        started = time.perf_counter()
        loss, parts, grad_norm, tokens = _train_step(run)
        seconds = time.perf_counter() - started
        run.progress.step += 1
        run.progress.real_tokens_seen += tokens
        run.progress.train_seconds += seconds
        window.append((loss, parts, grad_norm, tokens, seconds))
        bar.update(1)
        bar.set_postfix(loss=f"{loss:.4f}")
        window = _log_evaluate_save(run, window)
    bar.close()


def _log_evaluate_save(run: DistillationRun, window: list) -> list:
    args, step = run.args, run.progress.step
    if step % args.logging_steps == 0 or step == run.total_steps:
        record = {"step": step, "loss": sum(item[0] for item in window) / len(window)}
        for name in window[-1][1]:
            record[name] = sum(item[1][name] for item in window) / len(window)
        record.update(
            lr=run.scheduler.get_last_lr()[0],
            grad_norm=window[-1][2],
            real_tokens_seen=run.progress.real_tokens_seen,
            tokens_per_second=sum(item[3] for item in window) / sum(item[4] for item in window),
            train_seconds=run.progress.train_seconds,
        )
        run.metrics.log(record)
        window = []
    if run.eval_data is not None and args.eval_steps and step % args.eval_steps == 0 and step != run.total_steps:
        run.metrics.log({"step": step, **evaluate(run)})
    if args.checkpointing_steps and step % args.checkpointing_steps == 0:
        state = {**asdict(run.progress), "metrics_lines": run.metrics.lines, "run_args": run_arguments(args)}
        save_checkpoint(run.accelerator, run.output_dir, step, state, args.save_total_limit)
    return window


def _finish(run: DistillationRun) -> dict:
    """At the end of the schedule: the final evaluation, `distilled_model/` (model, tokenizer, card), `results.json`."""
    accelerator, progress = run.accelerator, run.progress
    results = {"step": progress.step, "finished": progress.step >= run.total_steps}
    if not results["finished"]:
        return results
    if run.eval_data is not None:
        final = evaluate(run)
        run.metrics.log({"step": progress.step, **final})
        results.update(final)
    config = run.unwrapped.config
    results.update(
        total_steps=run.total_steps,
        tokens_per_batch=run.args.tokens_per_batch,
        real_tokens_seen=progress.real_tokens_seen,
        train_seconds=progress.train_seconds,
        tokens_per_second=progress.real_tokens_seen / max(progress.train_seconds, 1e-9),
        train_sequences=len(run.long.data),
        eval_sequences=len(run.eval_data) if run.eval_data is not None else 0,
        teacher_window=run.long.window,
        model={
            "max_sequence_length": config.max_sequence_length,
            "num_blocks": config.num_blocks,
            "block_size": config.effective_block_size,
            "heads_per_shift": config.heads_per_shift,
            "block_relative_positions": config.block_relative_positions,
        },
        seed=run.args.seed,
    )
    run.results = results
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        _save_distilled_model(run)
        write_json_atomically(run.output_dir / RESULTS_FILE, results)
        logger.info(f"Saved the distilled model to {run.output_dir / DISTILLED_MODEL_DIR}.")
    accelerator.wait_for_everyone()
    return results


def _save_distilled_model(run: DistillationRun) -> Path:
    def write_card(folder: Path) -> None:
        card = distillation_model_card(
            run.args, run.unwrapped.config, run.results, read_metrics(run.output_dir / METRICS_FILE)
        )
        write_model_card(card, folder)

    return save_atomically(
        run.output_dir / DISTILLED_MODEL_DIR,
        run.unwrapped.save_pretrained,
        partial(save_tokenizer, run.tokenizer),
        write_card,
    )
