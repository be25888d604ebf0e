"""What self-distillation matches: the blockwise student's hidden states against its full-attention teacher's.

The teacher is the same checkpoint with full attention, frozen. Matching attention weights would teach little (a
blockwise head's attention already equals the teacher's restricted to its block and renormalised); the student learns
to reproduce what each layer *produces*:

- every layer's output, by the mean squared difference over real tokens divided by the teacher's variance of that
  layer (`normalised_mse`: layers differ in scale by orders of magnitude, so each counts as a fraction of its own
  spread; 1 is as far off as predicting the layer's mean);
- the last layer's direction, by one minus the mean cosine similarity over real tokens (`cosine_distance`).

The loss is `sum_l w_l * mse_l + cosine_weight * cosine_distance`. The embedding output is not matched: embeddings
stay frozen, and with block-relative positions the teacher's windows place some tokens at other positions.

When the student reads more tokens than the teacher's positions allow (N = 1024 from a 512-position checkpoint), the
teacher reads windows of its N, half-overlapping, and each token's target comes from the window in which it is most
central (`sliding_window_hidden_states`): what sliding windows of 512 compute for that token.
"""

from collections.abc import Sequence

import torch
import torch.nn.functional as F


# Below this the teacher's variance is treated as this: a layer whose outputs are constant cannot be normalised.
MIN_VARIANCE = 1e-12


def normalised_mse(student: torch.Tensor, teacher: torch.Tensor, is_real: torch.Tensor) -> torch.Tensor:
    """Mean squared difference of `(batch, seq, hidden)` states over the real tokens (`is_real`, boolean `(batch,
    seq)`) and features, divided by the variance of the teacher's states there."""
    student, teacher = student[is_real].float(), teacher[is_real].float()
    variance = teacher.var(unbiased=False).clamp_min(MIN_VARIANCE)
    return (student - teacher).square().mean() / variance


def cosine_distance(student: torch.Tensor, teacher: torch.Tensor, is_real: torch.Tensor) -> torch.Tensor:
    """One minus the mean cosine similarity of the real tokens' states."""
    return 1.0 - F.cosine_similarity(student[is_real].float(), teacher[is_real].float(), dim=-1).mean()


def layer_losses(
    student_states: Sequence[torch.Tensor], teacher_states: Sequence[torch.Tensor], is_real: torch.Tensor
) -> dict[str, torch.Tensor]:
    """`{"mse_layer_1": ..., ..., "mse_layer_L": ..., "cosine": ...}` from the `hidden_states` of both models (the
    embedding output first, as transformers returns them; it is not matched)."""
    if len(student_states) != len(teacher_states):
        raise ValueError(
            f"The student returned {len(student_states)} hidden states and the teacher {len(teacher_states)}: they "
            "must be the same checkpoint (the same number of layers)."
        )
    losses = {
        f"mse_layer_{layer}": normalised_mse(student_states[layer], teacher_states[layer], is_real)
        for layer in range(1, len(student_states))
    }
    losses["cosine"] = cosine_distance(student_states[-1], teacher_states[-1], is_real)
    return losses


def combined_loss(
    losses: dict[str, torch.Tensor], layer_weights: Sequence[float], cosine_weight: float
) -> torch.Tensor:
    """`sum_l layer_weights[l - 1] * mse_layer_l + cosine_weight * cosine`."""
    layers = [losses[f"mse_layer_{layer}"] for layer in range(1, len(layer_weights) + 1)]
    total = sum(weight * loss for weight, loss in zip(layer_weights, layers))
    return total + cosine_weight * losses["cosine"]


def parse_layer_weights(value: str, num_layers: int) -> list[float]:
    """`--layer_weights`: `"all"` (1 for every layer: the layers' losses summed), `"last"` (the last layer only) or
    one comma-separated weight per layer, e.g. `"0,0,1,1,1,1"`."""
    if value == "all":
        return [1.0] * num_layers
    if value == "last":
        return [0.0] * (num_layers - 1) + [1.0]
    try:
        weights = [float(part) for part in value.split(",")]
    except ValueError:
        weights = None
    if weights is None or len(weights) != num_layers or any(weight < 0 for weight in weights):
        raise ValueError(
            f"--layer_weights {value!r}: give 'all', 'last' or {num_layers} non-negative comma-separated weights, one "
            f"per layer of the model ({num_layers} layers)."
        )
    return weights


def window_starts(length: int, window: int, stride: int) -> list[int]:
    """The first token of each teacher window over `length` tokens: every `stride` tokens, the last one ending at
    `length` (0 only, when the input fits in one window)."""
    if length <= window:
        return [0]
    starts = list(range(0, length - window + 1, stride))
    if starts[-1] != length - window:
        starts.append(length - window)
    return starts


def most_central_window(length: int, starts: Sequence[int], window: int) -> torch.Tensor:
    """For each token `t < length`, the index of the window (of `starts`) that holds it farthest from its edges:
    `(length,)` long. With windows [0, 512), [256, 768), [512, 1024), tokens 0-383 take the first, 384-639 the
    second, 640-1023 the third."""
    token = torch.arange(length)[:, None]
    start = torch.tensor(list(starts))[None, :]
    inside = (token >= start) & (token < start + window)
    centrality = torch.minimum(token - start, start + window - 1 - token).masked_fill(~inside, -1)
    return centrality.argmax(dim=1)


@torch.no_grad()
def sliding_window_hidden_states(
    teacher, input_ids: torch.Tensor, attention_mask: torch.Tensor, window: int, stride: int
) -> tuple[torch.Tensor, ...]:
    """The teacher's `hidden_states` over `(batch, length)` inputs: one forward when they fit its `window` (its N),
    else over windows of `window` tokens every `stride` tokens (each read as an input of its own, positions restarting),
    each token's states taken from its most central window (`most_central_window`)."""
    batch, length = input_ids.shape
    if length <= window:
        return teacher(input_ids, attention_mask=attention_mask, output_hidden_states=True).hidden_states
    starts = window_starts(length, window, stride)
    windows = torch.cat([input_ids[:, start : start + window] for start in starts])
    masks = torch.cat([attention_mask[:, start : start + window] for start in starts])
    states = teacher(windows, attention_mask=masks, output_hidden_states=True).hidden_states
    owner = most_central_window(length, starts, window).to(input_ids.device)
    position = torch.arange(length, device=input_ids.device) - torch.tensor(starts, device=input_ids.device)[owner]
    # Window k of sequence i is row k * batch + i of the windows' batch.
    rows = owner[None, :] * batch + torch.arange(batch, device=input_ids.device)[:, None]
    return tuple(layer[rows, position[None, :].expand(batch, -1)] for layer in states)
