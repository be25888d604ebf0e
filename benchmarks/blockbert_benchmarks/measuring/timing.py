"""Timing on a shared machine: candidates run interleaved, round by round, so that slow phases hit them alike, and
only same-run ratios to an anchor are compared (the median over rounds of the per-round ratio, and the ratio of the
medians)."""

import statistics
import time
from collections.abc import Callable

import torch


def synchronized(function: Callable, device: str | torch.device) -> Callable:
    """`function` followed by a CUDA synchronisation when `device` is a GPU, so that wall-clock timing covers the
    kernels and not only their launch."""
    if torch.device(device).type != "cuda":
        return function

    def run():
        function()
        torch.cuda.synchronize(device)

    return run


def median_paired_ratio(times_s: list[float], anchor_times_s: list[float]) -> float:
    """Median over rounds of (time / the anchor's time in the same round): cancels slow phases of a noisy machine."""
    return statistics.median(mine / theirs for mine, theirs in zip(times_s, anchor_times_s))


def ratios_to(results: dict, anchor: str) -> dict:
    """For every candidate of an `interleaved_medians` result: `{name: {"ratio_of_medians", "median_paired_ratio"}}`
    against `anchor` (same-run ratios)."""
    return {
        name: {
            "ratio_of_medians": result["median_s"] / results[anchor]["median_s"],
            "median_paired_ratio": median_paired_ratio(result["times_s"], results[anchor]["times_s"]),
        }
        for name, result in results.items()
    }


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
        for name, ratios in ratios_to(results, anchor).items():
            results[name].update(ratios)
    return results
