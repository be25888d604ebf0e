"""Fine-tuning and evaluation of extractive QA models: `run_qa(QARunConfig)`, which `examples/run_qa.py` wires to its
command line. The options and their checks are in `arguments`, the model and windows in `preparation`, the training
loop in `training`, evaluation in `evaluation`; checkpoints, exact resume, the metrics log and the guards come from
`blockbert_hf.train.runs`."""

from pathlib import Path

import datasets
import transformers
from accelerate import Accelerator
from accelerate.utils import ProjectConfiguration, set_seed
from transformers import DataCollatorWithPadding

from ...model.pipeline_question_answering import QA_SETTINGS_ATTRIBUTE
from ..runs import (
    INPUT_DIGESTS,
    check_launch,
    check_output_dir,
    claim_output_dir,
    enable_gradient_checkpointing,
    end_run,
    hub_repo_id,
    input_digests,
    push_folder_to_hub,
    run_arguments,
    trackers,
    warn_emulated_bf16,
)
from .arguments import MODEL_DIR, QA_OUTPUTS, QARunConfig, _check_config
from .evaluation import _evaluate, _log_evaluation, _predict
from .preparation import _load_model_and_tokenizer, _prepare_data, _trained_qa_settings
from .training import (
    FEATURE_INDEX,
    _Distillation,
    _objective_block_size,
    _save_model,
    _set_up_training,
    _teacher_logits,
    _train,
    _train_dataloader,
    _write_model_card,
)


def _run_record(config: QARunConfig) -> dict:
    """What `run_args.json` and every checkpoint record of the run: its arguments, and the content digests of its local
    training data, so that a resume refuses a training file changed under the same path."""
    training_inputs = {"--train_file": config.train_file, "--dataset_name": config.dataset_name}
    return {**run_arguments(config), INPUT_DIGESTS: input_digests(training_inputs if config.do_train else {})}


def _start(config: QARunConfig) -> tuple[Accelerator, Path | None, dict]:
    """Checks the options, the launch and the output folder before any work; returns the accelerator, the
    checkpoint to resume and the run's record (`_run_record`)."""
    resume = _check_config(config)
    accelerator = Accelerator(
        mixed_precision=config.mixed_precision,
        gradient_accumulation_steps=config.gradient_accumulation_steps,
        log_with=trackers(config.report_to),
        project_config=ProjectConfiguration(project_dir=config.output_dir),
    )
    check_launch(accelerator, "examples/run_qa.py")
    warn_emulated_bf16(accelerator, "examples/run_qa.py")
    run_args = _run_record(config)
    inputs = {
        "--model_name_or_path": config.model_name_or_path,
        "--tokenizer_name": config.tokenizer_name,
        "--train_file": config.train_file,
        "--validation_file": config.validation_file,
    }
    resume_from = check_output_dir(
        config.output_dir,
        run_args,
        QA_OUTPUTS,
        resume_from=resume,
        overwrite=config.overwrite_output_dir,
        inputs=inputs,
    )
    claim_output_dir(accelerator, config.output_dir, run_args, QA_OUTPUTS, overwrite=config.overwrite_output_dir)
    return accelerator, resume_from, run_args


def run_qa(config: QARunConfig) -> dict:
    """Fine-tunes (`do_train`) and/or evaluates (`do_eval`) an extractive QA model; writes the fine-tuned model with
    its model card (`README.md`, with the evaluation when there is one) to `output_dir/model`, checkpoints to
    `output_dir/checkpoints/step_N`, the training log to `metrics.jsonl`, and `eval_predictions.json`,
    `eval_metrics.json` (and for SQuAD 2.0 `eval_null_odds.json`) to `output_dir`. Returns the metrics and a summary
    of the run (on the main process; empty elsewhere). With `teacher_logits_only`, writes the teacher's logits
    instead (`write_teacher_logits`)."""
    if config.teacher_logits_only:
        return write_teacher_logits(config)
    accelerator, resume_from, run_args = _start(config)
    results = _run(config, accelerator, resume_from, run_args)
    end_run(accelerator)  # after _run returned: no reference to the prepared model is left here
    return results


def write_teacher_logits(config: QARunConfig) -> dict:
    """`--teacher_logits_only`: the teacher's logits over the training windows this run would train on, written to
    `--teacher_logits`, so that a later session trains from the file without the teacher's weights; nothing is
    written to `output_dir`. Returns what was written (on the main process; empty elsewhere)."""
    _check_config(config)
    accelerator = Accelerator(mixed_precision=config.mixed_precision)
    set_seed(config.seed)  # as a training run does before preparing its windows, so the windows are the same
    model, tokenizer = _load_model_and_tokenizer(config)
    data, summary = _prepare_data(config, accelerator, model, tokenizer)
    collator = DataCollatorWithPadding(tokenizer)
    logits = _teacher_logits(config, accelerator, data.train_features, collator, _objective_block_size(summary))
    end_run(accelerator)
    written = {"teacher": config.teacher_model_name_or_path, "teacher_logits": config.teacher_logits}
    return {**summary, **written, "train_windows": len(logits.start)} if accelerator.is_main_process else {}


def _run(config: QARunConfig, accelerator: Accelerator, resume_from: Path | None, run_args: dict) -> dict:
    set_seed(config.seed)
    if not accelerator.is_main_process:
        datasets.utils.logging.set_verbosity_error()
        transformers.utils.logging.set_verbosity_error()
    model, tokenizer = _load_model_and_tokenizer(config)
    if config.gradient_checkpointing and config.do_train:
        enable_gradient_checkpointing(model)
    data, summary = _prepare_data(config, accelerator, model, tokenizer)
    collator = DataCollatorWithPadding(tokenizer)  # pads each batch to its longest window, on the right
    if config.do_train:
        setattr(model.config, QA_SETTINGS_ATTRIBUTE, _trained_qa_settings(model.config, summary))
        distillation = None
        if config.teacher_model_name_or_path or config.teacher_logits:
            logits = _teacher_logits(config, accelerator, data.train_features, collator, _objective_block_size(summary))
            distillation = _Distillation(logits, config.distillation_temperature, config.distillation_alpha)
            data.train_features = data.train_features.add_column(FEATURE_INDEX, list(range(len(data.train_features))))
            summary.update(
                teacher=config.teacher_model_name_or_path or config.teacher_logits,
                distillation_temperature=config.distillation_temperature,
                distillation_alpha=config.distillation_alpha,
            )
        dataloader, generator = _train_dataloader(config, data.train_features, collator)
        training = _set_up_training(config, accelerator, model, dataloader, generator)
        training.objective_block_size = _objective_block_size(summary)
        training.run_args = run_args
        training.distillation = distillation

        def evaluate_epoch(epoch: int) -> None:
            scored = _predict(config, accelerator, training.model, data, collator, summary)
            if scored is not None:
                _log_evaluation(training, epoch, scored.metrics)

        accelerator.init_trackers("blockbert_qa", config={k: v for k, v in run_args.items() if _is_scalar(v)})
        _train(training, resume_from, summary, evaluate_epoch if config.eval_strategy == "epoch" else None)
        model = training.model
        _save_model(config, accelerator, model, tokenizer, summary)
    else:
        # Inference only: no DistributedDataParallel wrapper, whose reducer would hold the process group to the end.
        model = accelerator.prepare_model(model, evaluation_mode=True)
    metrics = _evaluate(config, accelerator, model, data, collator, summary) if config.do_eval else {}
    if config.do_train and metrics and config.eval_strategy == "epoch":
        _log_evaluation(training, training.num_epochs - 1, metrics)  # the last epoch's evaluation is the final one
    if config.do_train and metrics:  # the saved model's card gets the evaluation (metrics: on the main process)
        model_config = accelerator.unwrap_model(model).config
        _write_model_card(
            config, accelerator, model_config, Path(config.output_dir) / MODEL_DIR, {**metrics, **summary}
        )
    if config.push_to_hub and accelerator.is_main_process:  # the finished folder, its card final
        repo_id = hub_repo_id(config.hub_model_id, config.output_dir)
        summary["hub_repo_id"] = push_folder_to_hub(Path(config.output_dir) / MODEL_DIR, repo_id)
    return {**metrics, **summary} if accelerator.is_main_process else {}


def _is_scalar(value) -> bool:
    """What a tracker's hyperparameters take (TensorBoard's hparams: numbers, strings and booleans)."""
    return isinstance(value, (int, float, str, bool))
