"""Timing helpers for the benchmarks: candidates timed interleaved in one process, medians, same-run ratios."""

import statistics
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass

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


# ---------------------------------------------------------------------------------------------------------------------
# Helpers of the efficiency benchmarks (benchmarks/memory_regression.py, inference.py, train_step.py)
# ---------------------------------------------------------------------------------------------------------------------

GIB = 2**30


@dataclass
class MemoryPeak:
    """What `track_peak_memory` measured. `peak_bytes`: the most bytes that tensors allocated inside the block held at
    once, above what was allocated on entry (the allocator's view, as the paper's "peak allocated").
    `rss_growth_bytes` (CPU on Linux only): the process's peak resident set during the block minus its resident set on
    entry, a cross-check that also counts what the allocator does not see (malloc caching, library scratch buffers,
    the profiler's own records)."""

    peak_bytes: int = 0
    rss_growth_bytes: int | None = None
    method: str = ""


CPU_MEMORY_METHOD = (
    "CPU: torch.profiler(profile_memory=True) records every allocation and free of the c10 CPU allocator; the peak is "
    "the running sum's maximum (tensors that existed before the block are not counted, and their frees are not seen)"
)
CUDA_MEMORY_METHOD = "CUDA: torch.cuda.max_memory_allocated after reset_peak_memory_stats, minus memory_allocated on entry"


def _resident_set_bytes(field: str) -> int | None:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _reset_peak_resident_set() -> int | None:
    """Resets the kernel's high-water mark of this process's resident set (Linux >= 4.0) and returns the current
    resident set; None where that is not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")
    except OSError:
        return None
    return _resident_set_bytes("VmRSS")


def _peak_of_allocation_events(prof, device_type: str = "cpu") -> int:
    """Largest running sum of the allocator's allocation (+) and free (-) events in a profile, in time order."""
    allocation = torch._C._profiler._EventType.Allocation
    events, stack = [], list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        node = stack.pop()
        stack.extend(node.children)
        if node.tag == allocation and node.extra_fields.device.type == device_type:
            events.append((node.start_time_ns, node.extra_fields.alloc_size))
    running = peak = 0
    for _, size in sorted(events, key=lambda event: event[0]):
        running += size
        peak = max(peak, running)
    return peak


@contextmanager
def track_peak_memory(device: str | torch.device = "cpu"):
    """Measures the peak memory of the tensors allocated inside the `with` block (see `MemoryPeak`):

        with track_peak_memory("cpu") as memory:
            training_step()
        memory.peak_bytes

    On CUDA it uses the caching allocator's statistics. On CPU, where torch keeps no allocator statistics, it runs the
    block under `torch.profiler` with `profile_memory=True` (which slows the block down: do not time it)."""
    device = torch.device(device)
    record = MemoryPeak()
    if device.type == "cuda":
        record.method = CUDA_MEMORY_METHOD
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        start = torch.cuda.memory_allocated(device)
        yield record
        torch.cuda.synchronize(device)
        record.peak_bytes = torch.cuda.max_memory_allocated(device) - start
        return
    if device.type != "cpu":
        raise ValueError(f"track_peak_memory measures 'cpu' or 'cuda' devices, got {device.type!r}.")
    record.method = CPU_MEMORY_METHOD
    resident_on_entry = _reset_peak_resident_set()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        yield record
    peak_resident = _resident_set_bytes("VmHWM")
    if resident_on_entry is not None and peak_resident is not None:
        record.rss_growth_bytes = peak_resident - resident_on_entry
    record.peak_bytes = _peak_of_allocation_events(prof, "cpu")
