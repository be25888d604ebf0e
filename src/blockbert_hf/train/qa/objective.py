"""The fine-tuning objective of extractive QA on windows of several blocks (`run_qa --qa_objective`).

- `"window"` (the default): one start and one end softmax over the whole window, labelled with the answer's first and
  last token, or with the window's null token (the first `[CLS]`) when the window does not hold the answer: the loss
  of the model itself (`BlockBertForQuestionAnswering`, and every `AutoModelForQuestionAnswering`).
- `"per_block"`: with the `"question_prefixed_blocks"` layout every block of `b` tokens is `[CLS] question [SEP]
  chunk [SEP]`, the input a sliding window of `b` tokens would be, and the `"null_relative"` window scoring scores a
  span against the `[CLS]` of its own block. This objective trains each block as such a window: a start and an end
  softmax over the block's own tokens, labelled with the answer's tokens in the block that holds the answer and with
  the block's own `[CLS]` in every other block (all blocks of a window without the answer). The window softmax
  trains only the first block's `[CLS]` as "no answer", and pushes every other block's `[CLS]` down with the other
  tokens; the per-block objective trains every `[CLS]` the scoring reads. With one block per window (N = b) both are
  the same loss.

Per block, as a sliding window trains:
- an answer that starts in one block's chunk and ends in the next (the layout's chunks are consecutive, so a window
  labels such a span; a block then holds only part of it) is neither a span of a block nor absent from it: the blocks
  holding part of it are left out of the loss, the window's other blocks are labelled null;
- a window that holds only part of the answer at its edge is labelled null in every block, as a sliding window is
  (the overlapping window holds it whole);
- blocks that are all padding are left out.
The loss is the mean over the blocks left in, of the start and end cross-entropies' mean.

Layouts without a null token per block (`"question_first"`: one `[CLS]`, in block 0) have no per-block objective:
choosing it there is a `ValueError`.
"""

import math

import torch
import torch.nn.functional as F

from ...model.pipeline_question_answering import qa_settings
from ...model.question_answering_windows import DEFAULT_WINDOW_LAYOUT, pair_template


QA_OBJECTIVES = ("window", "per_block")
DEFAULT_QA_OBJECTIVE = "window"
# What a fine-tuned model records of its objective: `config.question_answering["qa_objective"]`.
QA_OBJECTIVE_KEY = "qa_objective"
IGNORE_INDEX = -100  # a block left out of the loss (cross_entropy's default ignore_index)


def check_qa_objective(qa_objective: str) -> str:
    """`qa_objective` if it names one of `QA_OBJECTIVES`, else a `ValueError` listing them."""
    if qa_objective not in QA_OBJECTIVES:
        raise ValueError(
            f"qa_objective={qa_objective!r} is unknown: use one of {QA_OBJECTIVES} ('window': one start/end softmax "
            "over the whole window; 'per_block': one per block, with the window_layout 'question_prefixed_blocks')."
        )
    return qa_objective


def resolve_qa_objective(model_config, qa_objective: str | None, window_layout: str) -> str:
    """`qa_objective`, else the objective the model was fine-tuned with (`config.question_answering`), else
    `"window"`; a `ValueError` for `"per_block"` with a layout that has no null token per block."""
    recorded = qa_settings(model_config).get(QA_OBJECTIVE_KEY, DEFAULT_QA_OBJECTIVE)
    objective = check_qa_objective(qa_objective or recorded)
    if objective == "per_block" and window_layout == DEFAULT_WINDOW_LAYOUT:
        origin = "--qa_objective per_block" if qa_objective else "The model records qa_objective 'per_block', which"
        raise ValueError(
            f"{origin} trains every block against its own null token, which the window layout {window_layout!r} does "
            "not have (its question and [CLS] are in the first block only). Use --window_layout "
            "question_prefixed_blocks, or --qa_objective window."
        )
    return objective


def check_block_null_tokens(tokenizer) -> None:
    """The per-block objective reads each block's null token as its first token: a `ValueError` for a tokenizer whose
    pair template puts its CLS token elsewhere (XLNet puts it last)."""
    pieces = pair_template(tokenizer).pieces
    specials = [token for sequence, token, _ in pieces if sequence is None]
    if tokenizer.cls_token_id in specials and pieces[0][1] != tokenizer.cls_token_id:
        raise ValueError(
            f"--qa_objective per_block needs each block's null token (CLS) first, but {type(tokenizer).__name__} "
            "puts it elsewhere in a (question, context) pair. Use --qa_objective window."
        )


def block_span_labels(
    start_positions: torch.Tensor, end_positions: torch.Tensor, block_size: int, num_blocks: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """`(batch, num_blocks)` start and end labels, each a position within its block: the answer's tokens in the block
    that holds the whole answer, the block's null token (0, its first token) in every other block, `IGNORE_INDEX` in
    the blocks holding part of an answer that crosses into the next block. `start_positions` / `end_positions`: the
    window labels (`prepare_train_features`), the null token of the first block (0) for a window without the answer."""
    blocks = torch.arange(num_blocks, device=start_positions.device)
    start_block, end_block = start_positions // block_size, end_positions // block_size
    has_answer = (start_positions != 0) | (end_positions != 0)
    within = (has_answer & (start_block == end_block))[:, None] & (blocks == start_block[:, None])
    start_labels = torch.where(within, (start_positions - start_block * block_size)[:, None], 0)
    end_labels = torch.where(within, (end_positions - end_block * block_size)[:, None], 0)
    crossing = (has_answer & (start_block != end_block))[:, None]
    partial = crossing & (blocks >= start_block[:, None]) & (blocks <= end_block[:, None])
    return start_labels.masked_fill(partial, IGNORE_INDEX), end_labels.masked_fill(partial, IGNORE_INDEX)


def per_block_span_loss(
    start_logits: torch.Tensor,
    end_logits: torch.Tensor,
    start_positions: torch.Tensor,
    end_positions: torch.Tensor,
    block_size: int,
    attention_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """The per-block objective (see the module): `(batch, seq_len)` start/end logits, the windows' start/end labels,
    the block size `b` (blocks `[k b, (k + 1) b)` of each window), and the attention mask (padding is never a label and
    a block of padding only is left out). The mean over the blocks left in, of the mean of the start and end
    cross-entropies; 0 (with a gradient of 0) when none is left in."""
    batch, length = start_logits.shape
    num_blocks = math.ceil(length / block_size)
    pad = num_blocks * block_size - length
    real = torch.ones_like(start_logits, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
    real = F.pad(real, (0, pad), value=False).view(batch, num_blocks, block_size)
    start_labels, end_labels = block_span_labels(
        start_positions.view(-1), end_positions.view(-1), block_size, num_blocks
    )
    padding_only = ~real.any(dim=-1)
    start_labels = start_labels.masked_fill(padding_only, IGNORE_INDEX)
    end_labels = end_labels.masked_fill(padding_only, IGNORE_INDEX)

    def summed_cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        logits = F.pad(logits.float(), (0, pad)).view(batch, num_blocks, block_size)
        logits = logits.masked_fill(~real, torch.finfo(torch.float32).min)
        return F.cross_entropy(logits.view(-1, block_size), labels.view(-1), reduction="sum")

    blocks_in = (start_labels != IGNORE_INDEX).sum().clamp(min=1)
    total = (summed_cross_entropy(start_logits, start_labels) + summed_cross_entropy(end_logits, end_labels)) / 2
    return total / blocks_in
