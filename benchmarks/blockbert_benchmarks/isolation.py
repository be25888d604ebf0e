"""Running a measurement in a fresh Python process: no allocator state, caches or fragmentation from an earlier
model, an address-space budget that turns an oversized measurement into a clean "out of memory" (instead of the
kernel's OOM killer picking some process), and a timeout for measurements that take too long."""

import multiprocessing
import resource
import traceback
from collections.abc import Callable

import torch

from blockbert_benchmarks.measuring.memory import process_status_bytes


def is_out_of_memory(error: BaseException) -> bool:
    """Whether `error` says an allocation failed (torch's CPU allocator raises a RuntimeError past an rlimit)."""
    return isinstance(error, (MemoryError, torch.OutOfMemoryError)) or (
        isinstance(error, RuntimeError) and "can't allocate memory" in str(error)
    )


def _isolated_main(connection, function, kwargs, memory_budget_bytes, threads):
    """The child process of `run_isolated`: sets threads and the memory budget, runs, and sends back what happened."""
    torch.set_num_threads(threads)
    if memory_budget_bytes is not None:
        # Address-space limit: an allocation past the budget fails in this process (a clean "out of memory") instead
        # of waking the kernel's OOM killer, which may pick another process of the machine.
        virtual = process_status_bytes("VmSize")
        if virtual is not None:
            limit = virtual + memory_budget_bytes
            resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
    try:
        result = {"status": "ok", **function(**kwargs)}
    except BaseException as error:  # reported to the parent, which decides
        status = "out of memory" if is_out_of_memory(error) else "error"
        result = {"status": status, "detail": f"{type(error).__name__}: {error}"[:500]}
        if status == "error":
            result["traceback"] = traceback.format_exc(limit=8)
    connection.send(result)
    connection.close()


def run_isolated(
    function: Callable[..., dict],
    kwargs: dict,
    memory_budget_bytes: int | None = None,
    timeout_s: float | None = None,
    threads: int | None = None,
) -> dict:
    """Runs `function(**kwargs)` (a module-level function returning a dict) in a fresh Python process and returns
    `{"status": "ok", **its result}`, or `{"status": "out of memory" | "too slow" | "error", "detail": ...}`.

    A fresh process per measurement keeps measurements apart (no allocator state, no caches or fragmentation from an
    earlier model) and survives a measurement that runs out of memory. `memory_budget_bytes` caps the child's address
    space above what it holds after importing torch (Linux); `timeout_s` kills a child that has not answered in time.
    """
    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    threads = threads or torch.get_num_threads()
    process = context.Process(target=_isolated_main, args=(sender, function, kwargs, memory_budget_bytes, threads))
    process.start()
    sender.close()
    try:
        if not receiver.poll(timeout_s):
            process.kill()
            process.join()
            return {"status": "too slow", "detail": f"no result within {timeout_s:g} s"}
        try:
            return receiver.recv()
        except EOFError:  # the child died without answering
            process.join()
            if process.exitcode == -9:
                return {"status": "out of memory", "detail": "killed by SIGKILL (probably the kernel's OOM killer)"}
            return {"status": "error", "detail": f"the measuring process exited with code {process.exitcode}"}
    finally:
        receiver.close()
        process.join(timeout=60)
        if process.is_alive():
            process.kill()
            process.join()


def run_measurement(
    function: Callable[..., dict],
    kwargs: dict,
    isolated: bool = True,
    memory_budget_bytes: int | None = None,
    timeout_s: float | None = None,
    threads: int | None = None,
) -> dict:
    """`run_isolated`, or (isolated=False, for quick runs) the same call in this process, where running out of memory
    is reported as such and any other error propagates."""
    if isolated:
        return run_isolated(function, kwargs, memory_budget_bytes, timeout_s, threads)
    try:
        return {"status": "ok", **function(**kwargs)}
    except Exception as error:
        if is_out_of_memory(error):
            return {"status": "out of memory", "detail": f"{type(error).__name__}: {error}"[:500]}
        raise
