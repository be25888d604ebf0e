"""The largest batch whose training step fits in memory (the paper's motivation: at a given N, blockwise attention
leaves room for more sequences): a search over batch sizes, each probe one full AdamW step of a `*ForMaskedLM` that
either completes or runs out of memory."""

import gc
import math
import time
from collections.abc import Callable

import torch

from .isolation import is_out_of_memory
from .models import ModelSize
from .workloads import make_training_step, masked_lm_with_adamw, seeded_inputs


def release_memory(device) -> None:
    """Frees what the last measurement left: unreachable objects, and on CUDA the allocator's cached blocks."""
    gc.collect()
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()


def search_largest_batch(
    fits: Callable[[int], bool], guess: int, limit: int, time_left: Callable[[], float], tolerance: float = 1 / 16
) -> dict:
    """The largest batch size in [1, limit] for which `fits(batch)` is true, assuming that fitting is monotone.

    Starts at `guess`; until one probe fits and one does not, steps up (or down) by a factor that grows with every
    step (x1.125, x1.25, x1.5, x2, ...); then bisects until the bracket is at most `tolerance` of the largest fitting
    batch wide (at least 1). No probe starts once `time_left()` is not positive. Returns `largest_fitting` (0: not even
    one sequence fits, or none was tried), `smallest_failing` (None: none failed), `status` ("ok", "at limit": the
    limit fits, "cut": the time ran out first) and `probes` ([batch, fits, seconds] in order)."""
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}.")
    largest, smallest_failing, probes = 0, None, []
    batch, step = min(max(1, guess), limit), 1 / 8
    while True:
        if time_left() <= 0:
            status = "cut"
            break
        start = time.perf_counter()
        fitted = bool(fits(batch))
        probes.append([batch, fitted, round(time.perf_counter() - start, 3)])
        if fitted:
            largest = batch
        else:
            smallest_failing = batch
        if largest == limit:
            status = "at limit"
            break
        if smallest_failing is not None and smallest_failing - largest <= max(1, int(largest * tolerance)):
            status = "ok"
            break
        if smallest_failing is None:
            batch = min(limit, max(largest + 1, math.ceil(largest * (1 + step))))
            step *= 2
        elif largest == 0:
            batch = max(1, min(smallest_failing - 1, math.floor(smallest_failing * (1 - step))))
            step = min(2 * step, 1 / 2)
        else:
            batch = (largest + smallest_failing) // 2
    return dict(largest_fitting=largest, smallest_failing=smallest_failing, status=status, probes=probes)


class TrainingStepProbe:
    """A candidate's `*ForMaskedLM` on `device` with its AdamW state (after a warm-up step on one sequence), and
    `probe(batch_size)`: whether one training step on that many sequences of `seq_len` tokens fits in memory."""

    def __init__(
        self,
        candidate_key: str,
        seq_len: int,
        size: ModelSize,
        attention_dropout: float,
        device: str,
        autocast_dtype: str | None = None,
    ):
        self.seq_len, self.size, self.device, self.autocast_dtype = seq_len, size, device, autocast_dtype
        self.model, self.optimizer = masked_lm_with_adamw(candidate_key, seq_len, size, attention_dropout, device)
        self(1)

    def __call__(self, batch_size: int) -> bool:
        input_ids, labels = (x.to(self.device) for x in seeded_inputs(batch_size, self.seq_len, self.size.vocab_size))
        try:
            make_training_step(self.model, self.optimizer, input_ids, labels, self.autocast_dtype)()
            if torch.device(self.device).type == "cuda":
                torch.cuda.synchronize(self.device)
            return True
        except (RuntimeError, MemoryError) as error:
            if not is_out_of_memory(error):
                raise
            return False
        finally:
            # A step that ran out of memory leaves gradients and, until its traceback is gone, activations behind.
            self.optimizer.zero_grad(set_to_none=True)
            del input_ids, labels
            release_memory(self.device)

    def first_guess(self, measured: dict | None, measured_batch: int, limit: int) -> int:
        """The batch a measured step's memory predicts: free memory / activation bytes per sequence (the step's peak
        above weights and AdamW state, less the gradients, which do not grow with the batch). Without a measurement,
        or on the CPU (whose memory the process shares with the machine), a quarter of `limit`."""
        if torch.device(self.device).type != "cuda" or not measured or not measured.get("activation_bytes"):
            return max(1, limit // 4)
        per_sequence = (measured["activation_bytes"] - measured["gradient_bytes"]) / measured_batch
        free = torch.cuda.mem_get_info(self.device)[0]
        free += torch.cuda.memory_reserved(self.device) - torch.cuda.memory_allocated(self.device)
        return max(1, min(limit, int(0.95 * (free - measured["gradient_bytes"]) / max(per_sequence, 1))))
