"""One grid point (batch x length) of a comparison of many models, as `inference.py` and `train_step.py` run it: a
memory pass (a fresh process per model), then every model that fit timed interleaved in this process."""

import contextlib
import gc
from collections.abc import Callable

from tqdm.auto import tqdm

from .anchors import timing_pass
from .isolation import run_measurement
from .models import Candidate


def memory_pass(candidates: list[Candidate], function: Callable[..., dict], kwargs: dict, args, too_slow_s: float):
    """One `run_measurement(function, candidate_key=..., **kwargs)` per candidate; a candidate whose measured call took
    longer than `too_slow_s` is marked "too slow" (its memory figure is kept) and will not be timed."""
    rows = {}
    description = "memory" if args.in_process else "memory (one process each)"
    for candidate in tqdm(candidates, desc=description, leave=False):
        result = run_measurement(
            function,
            dict(candidate_key=candidate.key, **kwargs),
            isolated=not args.in_process,
            memory_budget_bytes=args.memory_budget_bytes,
            timeout_s=max(600.0, 3 * too_slow_s + 60),
            threads=args.threads,
        )
        if result["status"] == "ok" and result["profiled_s"] > too_slow_s:
            result["status"] = "too slow"
            result["detail"] = f"one call took {result['profiled_s']:.0f} s (> --too_slow_s {too_slow_s:.0f})"
        if result["status"] == "error":
            tqdm.write(f"{candidate.label}: {result.get('traceback', result.get('detail'))}")
        rows[candidate.key] = result
    return rows


def measure_section(
    candidates: list[Candidate],
    memory_function: Callable[..., dict],
    memory_kwargs: dict,
    build_runners: Callable[[list[Candidate]], dict[str, Callable]],
    args,
    name: str,
    timing_context: Callable = contextlib.nullcontext,
) -> dict:
    """One grid point: the memory pass (a process per model), then every model that fit timed interleaved in this
    process (`build_runners` makes their callables). Returns {candidate key: row}."""
    tqdm.write(f"== {name}: memory")
    rows = memory_pass(candidates, memory_function, memory_kwargs, args, args.too_slow_s)
    if args.skip_timing:
        return rows
    runnable = [c for c in candidates if rows[c.key]["status"] == "ok"]
    tqdm.write(f"== {name}: timing {len(runnable)} models interleaved, {args.repeats} rounds")
    if not runnable:
        return rows
    try:
        runners = build_runners(runnable)
        with timing_context():
            for key, timing in timing_pass(runners, args.repeats, args.warmup, args.device).items():
                rows[key].update(timing)
    except (RuntimeError, MemoryError) as error:  # one process holds all models: say so, keep the memory pass
        for candidate in runnable:
            rows[candidate.key]["detail"] = f"timing failed: {type(error).__name__}: {error}"[:300]
            rows[candidate.key]["status"] = "timing failed"
    finally:
        runners = None  # the models: freed before the next grid point builds its own
        gc.collect()
    return rows
