"""Evaluation of a QA run: the logits and loss over the evaluation windows, the answers under every window scoring
rule with their SQuAD metrics, and the prediction and metrics files."""

import json
import numbers
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from accelerate.logging import get_logger
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from ...model.pipeline_question_answering import WINDOW_SCORING_RULES
from ...saving import write_json_atomically
from .arguments import QARunConfig
from .features import EVAL_METADATA_COLUMNS
from .postprocessing import load_squad_metric, postprocess_qa_predictions, squad_references
from .preparation import _QAData
from .training import _objective_block_size, _outputs_and_loss, _Training


logger = get_logger(__name__)


def _eval_loop(
    accelerator, model, dataloader, block_size: int | None
) -> tuple[list[np.ndarray], list[np.ndarray], float]:
    """Start/end logits of every window, in dataset order, gathered from all processes, and the mean loss over the
    windows (their labels: the answer's tokens, or the null token; the per-block objective's with `block_size`)."""
    model.eval()
    starts, ends = [], []
    loss_sum, windows = torch.zeros(()), 0
    for batch in tqdm(dataloader, desc="Evaluating", disable=not accelerator.is_local_main_process):
        with torch.no_grad():
            outputs, loss = _outputs_and_loss(model, batch, block_size)
        batch_windows = accelerator.gather_for_metrics(batch["input_ids"][:, :1]).shape[0]
        loss_sum += accelerator.reduce(loss.detach().float(), reduction="mean").cpu() * batch_windows
        windows += batch_windows
        # Batches are padded per process: pad to a common length before gathering (the padding is never read).
        start = accelerator.pad_across_processes(outputs.start_logits.float(), dim=1, pad_index=-1e4)
        end = accelerator.pad_across_processes(outputs.end_logits.float(), dim=1, pad_index=-1e4)
        start, end = accelerator.gather_for_metrics((start, end))
        starts.extend(start.cpu().numpy())
        ends.extend(end.cpu().numpy())
    return starts, ends, float(loss_sum) / max(windows, 1)


@dataclass
class _Scored:
    """The predictions of one evaluation under every window scoring rule, and their metrics."""

    metrics: dict  # the run's rule's metrics, with `scores_by_window_scoring` (every rule's)
    implementation: str  # which SQuAD metric computed them
    answers_by_rule: dict[str, dict[str, str]]
    predictions: list[dict]  # the run's rule's, in the `evaluate` format
    nbest: dict


def _score(config: QARunConfig, data: _QAData, start_logits, end_logits, version_2, window_scoring) -> _Scored:
    """Scores the predictions under the run's window scoring rule and, for comparison, under every other rule."""
    metric, implementation = load_squad_metric(version_2)
    references = squad_references(data.eval_examples)
    by_rule, answers_by_rule = {}, {}
    for rule in WINDOW_SCORING_RULES:
        rule_predictions, rule_nbest = postprocess_qa_predictions(
            data.eval_examples,
            data.eval_features,
            start_logits,
            end_logits,
            version_2=version_2,
            n_best_size=config.n_best_size,
            max_answer_length=config.max_answer_length,
            null_score_diff_threshold=config.null_score_diff_threshold,
            window_scoring=rule,
        )
        # Plain numbers for JSON (the Hub modules may return numpy scalars).
        by_rule[rule] = {
            key: int(v) if isinstance(v, numbers.Integral) else float(v)
            for key, v in metric.compute(predictions=rule_predictions, references=references).items()
        }
        answers_by_rule[rule] = {p["id"]: p["prediction_text"] for p in rule_predictions}
        if rule == window_scoring:
            predictions, nbest = rule_predictions, rule_nbest
    metrics = {**by_rule[window_scoring], "scores_by_window_scoring": by_rule}
    return _Scored(metrics, implementation, answers_by_rule, predictions, nbest)


def _write_evaluation(config: QARunConfig, scored: _Scored, version_2: bool, summary: dict) -> None:
    output_dir, rule = Path(config.output_dir), summary["window_scoring"]
    write_json_atomically(output_dir / "eval_predictions.json", scored.answers_by_rule[rule])
    write_json_atomically(output_dir / "eval_predictions_by_window_scoring.json", scored.answers_by_rule, indent=None)
    if version_2:
        write_json_atomically(
            output_dir / "eval_null_odds.json", {p["id"]: p["no_answer_probability"] for p in scored.predictions}
        )
    if config.write_nbest:
        write_json_atomically(output_dir / "eval_nbest_predictions.json", scored.nbest)
    write_json_atomically(
        output_dir / "eval_metrics.json", {**scored.metrics, "metric_implementation": scored.implementation, **summary}
    )
    logger.info(f"Evaluation ({scored.implementation}): {json.dumps(scored.metrics)}")


def _predict(config: QARunConfig, accelerator, model, data: _QAData, collator, summary) -> _Scored | None:
    """Runs the model on the evaluation windows and scores its answers (on the main process; None elsewhere)."""
    loader = DataLoader(
        data.eval_features.remove_columns(list(EVAL_METADATA_COLUMNS)),
        collate_fn=collator,
        batch_size=config.per_device_eval_batch_size,
    )
    started = time.perf_counter()
    block_size = _objective_block_size(summary)
    start_logits, end_logits, loss = _eval_loop(accelerator, model, accelerator.prepare(loader), block_size)
    summary["eval_seconds"] = round(time.perf_counter() - started, 1)
    if not accelerator.is_main_process:
        return None
    scored = _score(
        config, data, start_logits, end_logits, summary["version_2_with_negative"], summary["window_scoring"]
    )
    scored.metrics["eval_loss"] = loss
    return scored


def _evaluate(config: QARunConfig, accelerator, model, data: _QAData, collator, summary) -> dict:
    """The evaluation of the final model: its predictions and metrics files (metrics on the main process)."""
    scored = _predict(config, accelerator, model, data, collator, summary)
    if scored is None:
        return {}
    _write_evaluation(config, scored, summary["version_2_with_negative"], summary)
    return scored.metrics


def _log_evaluation(training: _Training, epoch: int, metrics: dict) -> None:
    """An evaluation record in metrics.jsonl: `eval_loss`, `eval_exact_match` and `eval_f1` at the step it was made."""
    exact_match = metrics.get("exact_match", metrics.get("exact"))
    record = {"step": training.completed_steps, "epoch": epoch, "eval_loss": metrics["eval_loss"]}
    record.update(eval_exact_match=exact_match, eval_f1=metrics["f1"])
    training.metrics.log(record)
    logger.info(f"epoch {epoch} evaluation: {json.dumps(record)}")
