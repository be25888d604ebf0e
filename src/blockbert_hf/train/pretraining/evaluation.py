"""Masked-LM loss and validation perplexity, during a run (`evaluate`) and of a saved model (`evaluate_saved_model`,
`examples/evaluate_mlm.py`)."""

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import torch
from torch.utils.data import DataLoader

from .arguments import WIKITEXT_HEADING
from .data import tokenize_and_pack, validation_collator
from .documents import read_documents


class MaskedLMLoss:
    """Cross-entropy over the masked tokens of a batch with the model's `loss_function` (transformers'
    `ForMaskedLMLoss`): summed and divided by `num_items_in_batch`, the masked tokens of the whole global batch, so
    that 1 process x k micro-batches and k processes x 1 micro-batch compute the same gradient."""

    def __init__(self, model):
        self.loss_function = model.loss_function
        # With `config.sparse_prediction` the labels go to the model, which runs its head on the labelled positions.
        self.sparse = bool(getattr(model.config, "sparse_prediction", False))

    def __call__(self, model, batch: dict, num_items_in_batch) -> torch.Tensor:
        labels = batch["labels"]
        output = model(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=labels if self.sparse else None
        )
        logits = output.logits
        if logits.dim() == 2:  # sparse prediction: the logits of the labelled positions, in order
            labels = labels[labels != -100]
        return self.loss_function(logits, labels, vocab_size=logits.shape[-1], num_items_in_batch=num_items_in_batch)


def perplexity(loss: float) -> float:
    return math.exp(loss) if loss < 709 else math.inf  # exp overflows a float beyond 709


def evaluate(model, dataset, collator, accelerator, batch_size: int) -> dict[str, float]:
    """Validation loss (mean over all masked tokens) and perplexity; each process takes a contiguous shard."""
    shard = dataset.shard(num_shards=accelerator.num_processes, index=accelerator.process_index, contiguous=True)
    loader = DataLoader(shard, batch_size=batch_size, collate_fn=collator)
    loss = MaskedLMLoss(accelerator.unwrap_model(model))
    totals = torch.zeros(2, dtype=torch.float64, device=accelerator.device)
    was_training = model.training
    model.eval()
    with torch.no_grad(), accelerator.autocast():
        for batch in loader:
            batch = {key: value.to(accelerator.device) for key, value in batch.items()}
            loss_sum = loss(model, batch, num_items_in_batch=1)  # divided by 1: the sum over the batch
            totals += torch.stack([loss_sum.double(), (batch["labels"] != -100).sum().double()])
    model.train(was_training)
    totals = accelerator.reduce(totals, reduction="sum")
    mean = (totals[0] / totals[1]).item()
    return {"eval_loss": mean, "eval_perplexity": perplexity(mean), "eval_masked_tokens": int(totals[1].item())}


@dataclass
class MLMEvaluationArguments:
    """Options of `examples/evaluate_mlm.py` besides the model folder (the arguments of `evaluate_saved_model`)."""

    validation_files: list[str] = field(metadata={"help": ".txt, .txt.gz or .jsonl files"})
    document_boundary: Literal["file", "blank_line", "heading"] = field(
        default="file", metadata={"help": "where a document ends, as in run_mlm.py"}
    )
    document_heading_regex: str = field(
        default=WIKITEXT_HEADING, metadata={"help": "with document_boundary=heading: a line that starts a document"}
    )
    text_column: str = field(default="text", metadata={"help": "the text field of .jsonl records"})
    max_eval_sequences: int | None = field(default=None, metadata={"help": "score only the first K packed sequences"})
    batch_size: int = 16


class UnreliableScoreError(ValueError):
    """A saved model's score would mean nothing: part of it is randomly initialised, or its loss is not finite."""

    def __init__(self, message: str, metrics: dict | None = None):
        super().__init__(message)
        self.metrics = metrics


def check_mlm_weights_loaded(model_path: str, loading_info: dict) -> None:
    """Refuses a masked LM whose checkpoint lacks some of its weights (randomly initialised instead), e.g. a sentence
    encoder converted without an MLM head."""
    missing = sorted(loading_info.get("missing_keys") or [])
    if missing:
        head = [key for key in missing if "lm_head" in key or key.startswith(("cls.", "lm_"))]
        what = "its MLM head" if head else "some of its weights"
        raise UnreliableScoreError(
            f"{model_path} does not hold {what}: {', '.join(missing[:8])}{' ...' if len(missing) > 8 else ''} "
            f"({len(missing)} tensor(s)) would be randomly initialised, so its perplexity would mean nothing. "
            "Score a masked LM (e.g. a pre-trained run's final_model/), or pre-train this one first."
        )


def evaluate_saved_model(
    model_path: str,
    validation_files: Sequence[str],
    document_boundary: str = "file",
    document_heading_regex: str = WIKITEXT_HEADING,
    text_column: str = "text",
    max_eval_sequences: int | None = None,
    batch_size: int = 16,
    mlm_probability: float = 0.15,
) -> dict[str, float]:
    """Validation loss and perplexity of a saved masked LM (e.g. a run's `final_model/`) on local text files, packed
    and masked exactly as `run_pretraining` validates (N = the model's; masks seeded by `VALIDATION_SEED`). Raises
    `UnreliableScoreError` for a model with randomly initialised weights or a non-finite loss."""
    from accelerate import Accelerator
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    if not validation_files:
        raise ValueError("Give at least one validation file (.txt, .txt.gz or .jsonl).")
    model, loading_info = AutoModelForMaskedLM.from_pretrained(model_path, output_loading_info=True)
    check_mlm_weights_loaded(model_path, loading_info)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    seq_len = getattr(model.config, "max_sequence_length", None) or tokenizer.model_max_length
    documents = read_documents(validation_files, document_boundary, document_heading_regex, text_column)
    data = tokenize_and_pack(documents, tokenizer, seq_len)
    if max_eval_sequences:
        data = data.select(range(min(max_eval_sequences, len(data))))
    accelerator = Accelerator()
    collator = validation_collator(tokenizer, mlm_probability)
    metrics = {
        **evaluate(accelerator.prepare(model), data, collator, accelerator, batch_size),
        "eval_sequences": len(data),
    }
    if not math.isfinite(metrics["eval_loss"]):
        raise UnreliableScoreError(
            f"The validation loss of {model_path} is {metrics['eval_loss']} over {metrics['eval_masked_tokens']} "
            "masked tokens: its weights hold NaN/inf values, or the files hold no text to score.",
            metrics,
        )
    return metrics
