"""The models the benchmarks take ratios against, and the timing pass that reports ratios to each of them."""

from collections.abc import Callable

from blockbert_benchmarks.measuring.timing import interleaved_medians, ratios_to, synchronized


def pick_anchors(keys: list[str]) -> list[str]:
    """The models ratios are taken against: transformers' RoBERTa (eager, sdpa) when measured, else BlockBERT's full
    pattern with the same kernel (which computes exactly RoBERTa)."""
    anchors = []
    for kernel in ("eager", "sdpa"):
        for key in (f"roberta-{kernel}", f"blockbert-full-{kernel}"):
            if key in keys:
                anchors.append(key)
                break
    return anchors


def timing_pass(runners: dict[str, Callable], repeats: int, warmup: int, device) -> dict:
    """`interleaved_medians` over the runners (synchronised on CUDA), with ratios to every anchor among them."""
    results = interleaved_medians({key: synchronized(run, device) for key, run in runners.items()}, repeats, warmup)
    for anchor in pick_anchors(list(results)):
        for key, ratios in ratios_to(results, anchor).items():
            results[key].setdefault("ratios", {})[anchor] = ratios
    return results
