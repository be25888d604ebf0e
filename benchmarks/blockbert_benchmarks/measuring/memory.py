"""Measuring memory: the peak bytes of the tensors allocated inside a block of code (CPU through torch.profiler's
allocation events, CUDA through the caching allocator's statistics), the paper's model and optimizer memory, and the
least-squares line of activation memory against the sequence length."""

import os
import statistics
from contextlib import contextmanager
from dataclasses import dataclass

import torch


GIB = 2**30

CPU_MEMORY_METHOD = (
    "CPU: torch.profiler(profile_memory=True) records every allocation and free of the c10 CPU allocator; the peak is "
    "the largest sum of bytes held by tensors allocated during the measured call (tensors that existed before it are "
    "not counted, nor are their frees)"
)
CUDA_MEMORY_METHOD = (
    "CUDA: torch.cuda.max_memory_allocated after reset_peak_memory_stats, minus memory_allocated on entry"
)


@dataclass
class MemoryPeak:
    """What `track_peak_memory` measured. `peak_bytes`: the most bytes that tensors allocated inside the block held at
    once, above what was allocated on entry (the allocator's view, as the paper's "peak allocated").
    `rss_growth_bytes` (CPU on Linux only): the process's peak resident set during the block minus its resident set on
    entry, a cross-check that also counts what the allocator does not see (malloc caching, library scratch buffers,
    the profiler's own records)."""

    peak_bytes: int = 0
    # Bytes still held at the end of the block by tensors allocated inside it (e.g. what a forward keeps for backward).
    retained_bytes: int = 0
    rss_growth_bytes: int | None = None
    method: str = ""


def process_status_bytes(field: str) -> int | None:
    """A size field of /proc/self/status (`VmRSS`, `VmHWM`, `VmSize`, ...) in bytes; None where there is none."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def available_memory_bytes() -> int | None:
    """MemAvailable of /proc/meminfo (Linux), or None."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def reset_peak_resident_set() -> int | None:
    """Resets the kernel's high-water mark of this process's resident set (Linux >= 4.0) and returns the current
    resident set; None where that is not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")
    except OSError:
        return None
    return process_status_bytes("VmRSS")


def _peak_of_allocation_events(prof, device_type: str = "cpu") -> tuple[int, int]:
    """Largest and final sum of the bytes held by tensors allocated during a profile, from the allocator's allocation
    and free events in time order. Frees of memory allocated before the profile started are ignored (the allocator
    may report them when it learnt their size in an earlier profile)."""
    allocation = torch._C._profiler._EventType.Allocation
    events, stack = [], list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        node = stack.pop()
        stack.extend(node.children)
        if node.tag == allocation and node.extra_fields.device.type == device_type:
            events.append((node.start_time_ns, node.extra_fields.ptr, node.extra_fields.alloc_size))
    live, running, peak = {}, 0, 0
    for _, pointer, size in sorted(events, key=lambda event: event[0]):
        if size > 0:
            live[pointer] = size
            running += size
            peak = max(peak, running)
        elif pointer in live:
            running -= live.pop(pointer)
    return peak, running


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
        record.retained_bytes = torch.cuda.memory_allocated(device) - start
        return
    if device.type != "cpu":
        raise ValueError(f"track_peak_memory measures 'cpu' or 'cuda' devices, got {device.type!r}.")
    record.method = CPU_MEMORY_METHOD
    # Kineto, the profiler's back end, prints its start and stop ("USDT: ... profiler_start") on stderr, which reads as
    # an error; level 6 silences it. Read when the profiler first starts in the process; a value the user set is kept.
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")
    resident_on_entry = reset_peak_resident_set()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        yield record
    peak_resident = process_status_bytes("VmHWM")
    if resident_on_entry is not None and peak_resident is not None:
        record.rss_growth_bytes = peak_resident - resident_on_entry
    record.peak_bytes, record.retained_bytes = _peak_of_allocation_events(prof, "cpu")


def parameter_bytes(model: torch.nn.Module) -> int:
    """The paper's model memory: bytes of the (distinct) parameters."""
    return sum(parameter.numel() * parameter.element_size() for parameter in model.parameters())


def optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """The paper's optimizer memory: bytes of the optimizer's state tensors (Adam: step, exp_avg, exp_avg_sq)."""
    return sum(
        value.numel() * value.element_size()
        for state in optimizer.state.values()
        for value in state.values()
        if isinstance(value, torch.Tensor)
    )


def fit_line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares `y = slope * x + intercept` (activation memory against N); needs at least two distinct x."""
    if len(xs) != len(ys) or len(set(xs)) < 2:
        raise ValueError(f"A line fit needs at least two points with distinct x, got x = {list(xs)}.")
    fit = statistics.linear_regression(xs, ys)
    return fit.slope, fit.intercept
