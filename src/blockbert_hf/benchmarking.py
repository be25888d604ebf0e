"""Timing helpers for the benchmarks: candidates timed interleaved in one process, medians, same-run ratios."""

import statistics
import time
from collections.abc import Callable

import torch

from .configuration_blockbert import BlockBertConfig


def bert_base_config(max_sequence_length: int, **overrides) -> BlockBertConfig:
    """BERT-base dimensions (12 layers, hidden 768, 12 heads, FFN 3072, vocab 30522) with RoBERTa positions."""
    fields = dict(
        vocab_size=30522,
        hidden_size=768,
        num_hidden_layers=12,
        num_attention_heads=12,
        intermediate_size=3072,
        max_position_embeddings=max_sequence_length + 2,
    )
    fields.update(overrides)
    return BlockBertConfig(**fields)


def interleaved_medians(
    candidates: dict[str, Callable[[], object]], repeats: int = 5, warmup: int = 1, anchor: str | None = None
) -> dict:
    """Runs every candidate `warmup` times, then `repeats` rounds of one call each, in turn, so that drifts in machine
    speed hit all candidates alike. Returns {name: {"median_s", "times_s"}}, plus, when `anchor` names a candidate,
    "ratio_of_medians" (median / anchor's median) and "median_paired_ratio" (median over rounds of the time divided
    by the anchor's time in the same round, which cancels slow phases of a noisy machine)."""
    for _ in range(warmup):
        for run in candidates.values():
            run()
    times = {name: [] for name in candidates}
    for _ in range(repeats):
        for name, run in candidates.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    results = {name: {"median_s": statistics.median(values), "times_s": values} for name, values in times.items()}
    if anchor is not None:
        for name, result in results.items():
            result["ratio_of_medians"] = result["median_s"] / results[anchor]["median_s"]
            result["median_paired_ratio"] = statistics.median(
                mine / theirs for mine, theirs in zip(times[name], times[anchor])
            )
    return results


def describe_machine() -> str:
    """CPU model, core count, torch version and threads (and the GPU when there is one)."""
    import os
    import platform

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as handle:
            cpu = next(line.split(":", 1)[1].strip() for line in handle if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    device = f"CUDA {torch.cuda.get_device_name()}" if torch.cuda.is_available() else "no GPU"
    return f"{cpu}, {os.cpu_count()} cores, torch {torch.__version__} with {torch.get_num_threads()} threads, {device}"
