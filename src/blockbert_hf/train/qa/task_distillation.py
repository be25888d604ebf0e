"""Task distillation for extractive QA (`run_qa --teacher_model_name_or_path` / `--teacher_logits`).

The student's loss is `alpha * T^2 * KL(teacher || student) + (1 - alpha) * CE`, as transformers' research example
`run_squad_w_distillation.py` weighs them: the KL divergence of the start and of the end softmaxes at temperature `T`
(their mean), over the real positions of each softmax the objective has:

- the window objective: one softmax over the window; the teacher reads the same window;
- the per-block objective: one softmax per block. With the `"question_prefixed_blocks"` layout each block is
  `[CLS] question [SEP] chunk [SEP]` with positions restarting (block-relative positions), exactly a window a
  teacher of N = `b` reads: the teacher reads every block as an input of its own (`teacher_span_logits`), and its
  distribution over that block is the block's target.

The teacher's logits over the training windows are computed once, before training, and can be cached in fp16
(`TeacherLogits.save`): a few MB carry a teacher between sessions instead of its weights. A cache records a digest of
the windows it was computed on, and is refused for other windows.
"""

import hashlib
import math
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from tqdm.auto import tqdm


CACHE_FORMAT = "blockbert-hf teacher logits 1"


def distillation_kl(
    student_logits: torch.Tensor, teacher_logits: torch.Tensor, is_real: torch.Tensor, temperature: float
) -> torch.Tensor:
    """`T^2 * KL(softmax(teacher / T) || softmax(student / T))` over the real positions of each row of `(rows,
    positions)` logits, averaged over the rows that have one."""
    lowest = torch.finfo(torch.float32).min
    student = (student_logits.float() / temperature).masked_fill(~is_real, lowest)
    teacher = (teacher_logits.float() / temperature).masked_fill(~is_real, lowest)
    rows = is_real.any(dim=-1)
    if not bool(rows.any()):
        return student_logits.sum() * 0.0
    log_student = F.log_softmax(student[rows], dim=-1)
    log_teacher = F.log_softmax(teacher[rows], dim=-1)
    kl = (log_teacher.exp() * (log_teacher - log_student)).masked_fill(~is_real[rows], 0.0).sum(dim=-1)
    return kl.mean() * temperature**2


def as_blocks(tensor: torch.Tensor, block_size: int, value=0) -> torch.Tensor:
    """`(batch, length)` as `(batch * blocks, block_size)` rows, the last block padded with `value`."""
    batch, length = tensor.shape
    blocks = math.ceil(length / block_size)
    return F.pad(tensor, (0, blocks * block_size - length), value=value).view(batch * blocks, block_size)


def from_blocks(rows: torch.Tensor, length: int) -> torch.Tensor:
    """The inverse of `as_blocks` for `batch` inputs of `length`: `(batch, length)`."""
    blocks = math.ceil(length / rows.shape[-1])
    return rows.reshape(-1, blocks * rows.shape[-1])[:, :length]


def span_distillation_loss(
    student_start: torch.Tensor,
    student_end: torch.Tensor,
    teacher_start: torch.Tensor,
    teacher_end: torch.Tensor,
    attention_mask: torch.Tensor | None,
    temperature: float,
    block_size: int | None = None,
) -> torch.Tensor:
    """The mean of the start and end `distillation_kl`, over the window (`block_size` None) or over each block."""
    is_real = torch.ones_like(student_start, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
    pairs = [(student_start, teacher_start), (student_end, teacher_end)]
    if block_size is not None:
        is_real = as_blocks(is_real, block_size, value=False)
        pairs = [(as_blocks(student, block_size), as_blocks(teacher, block_size)) for student, teacher in pairs]
    return sum(distillation_kl(student, teacher, is_real, temperature) for student, teacher in pairs) / 2


@torch.no_grad()
def teacher_span_logits(teacher, batch: dict, block_size: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The teacher's `(batch, length)` start and end logits: over the window, or (`block_size`) over each block read
    as an input of its own (its padding at the end, positions restarting); zero where a block is padding only."""
    inputs = {name: batch[name] for name in ("input_ids", "attention_mask", "token_type_ids") if name in batch}
    if block_size is None:
        outputs = teacher(**inputs)
        return outputs.start_logits.float(), outputs.end_logits.float()
    length = inputs["input_ids"].shape[1]
    pad_token_id = teacher.config.pad_token_id if teacher.config.pad_token_id is not None else 0
    fill = {"input_ids": pad_token_id, "attention_mask": 0, "token_type_ids": 0}
    rows = {name: as_blocks(value, block_size, fill[name]) for name, value in inputs.items()}
    if "attention_mask" not in rows:
        rows["attention_mask"] = as_blocks(torch.ones_like(inputs["input_ids"]), block_size, 0)
    keep = rows["attention_mask"].bool().any(dim=-1)
    start = torch.zeros(keep.shape[0], block_size, device=keep.device)
    end = torch.zeros_like(start)
    if bool(keep.any()):
        width = int(rows["attention_mask"][keep].sum(dim=-1).max())  # right-padded: the blocks' longest real prefix
        outputs = teacher(**{name: value[keep][:, :width] for name, value in rows.items()})
        start[keep, :width], end[keep, :width] = outputs.start_logits.float(), outputs.end_logits.float()
    return from_blocks(start, length), from_blocks(end, length)


def windows_digest(input_ids: list[list[int]]) -> str:
    """The sha256 of the training windows' token ids, in order: what a teacher-logits cache was computed on."""
    digest = hashlib.sha256()
    for ids in input_ids:
        digest.update(np.asarray(ids, dtype=np.int64).tobytes())
        digest.update(b"\0")
    return digest.hexdigest()


class TeacherLogits:
    """The teacher's start and end logits for every training window, in fp16 (what the loss needs of the teacher)."""

    def __init__(self, start: list[torch.Tensor], end: list[torch.Tensor], digest: str, block_size: int | None):
        self.start, self.end, self.digest, self.block_size = start, end, digest, block_size

    @classmethod
    def compute(cls, teacher, features, collator, block_size: int | None, batch_size: int, device) -> "TeacherLogits":
        """Runs the teacher over `features` (the training windows, in order) in batches."""
        teacher = teacher.to(device).eval()
        columns = [name for name in ("input_ids", "attention_mask", "token_type_ids") if name in features.column_names]
        start, end = [], []
        for first in tqdm(range(0, len(features), batch_size), desc="Teacher logits", unit="batch"):
            rows = features.select(range(first, min(first + batch_size, len(features))))
            batch = collator([{name: row[name] for name in columns} for row in rows])
            batch = {name: value.to(device) for name, value in batch.items()}
            batch_start, batch_end = teacher_span_logits(teacher, batch, block_size)
            for index, ids in enumerate(rows["input_ids"]):
                start.append(batch_start[index, : len(ids)].half().cpu())
                end.append(batch_end[index, : len(ids)].half().cpu())
        return cls(start, end, windows_digest(features["input_ids"]), block_size)

    def save(self, path: str | Path) -> None:
        lengths = torch.tensor([len(row) for row in self.start], dtype=torch.int64)
        tensors = {"start": torch.cat(self.start), "end": torch.cat(self.end), "lengths": lengths}
        metadata = {"format": CACHE_FORMAT, "windows_sha256": self.digest, "block_size": str(self.block_size)}
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        save_file(tensors, str(path), metadata=metadata)

    @classmethod
    def load(cls, path: str | Path, features, block_size: int | None) -> "TeacherLogits":
        """The cache at `path`; a `ValueError` where it was computed on other windows or for another objective."""
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as handle:
            metadata = handle.metadata() or {}
        if metadata.get("format") != CACHE_FORMAT:
            raise ValueError(f"--teacher_logits {path} is not a teacher-logits file written by run_qa.")
        digest = windows_digest(features["input_ids"])
        if metadata.get("windows_sha256") != digest or metadata.get("block_size") != str(block_size):
            raise ValueError(
                f"--teacher_logits {path} was computed on other training windows (or another objective's blocks) "
                "than this run's: compute it again with --teacher_model_name_or_path and this run's data options."
            )
        tensors = load_file(str(path))
        lengths = tensors["lengths"].tolist()
        return cls(list(tensors["start"].split(lengths)), list(tensors["end"].split(lengths)), digest, block_size)

    def batch(self, indices: torch.Tensor, length: int, device) -> tuple[torch.Tensor, torch.Tensor]:
        """The `(batch, length)` float32 logits of the windows `indices`, padded with zeros."""
        start = torch.zeros(len(indices), length)
        end = torch.zeros(len(indices), length)
        for row, index in enumerate(indices.tolist()):
            start[row, : len(self.start[index])] = self.start[index].float()
            end[row, : len(self.end[index])] = self.end[index].float()
        return start.to(device), end.to(device)
