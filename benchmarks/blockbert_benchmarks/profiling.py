"""Where the time goes: one training step or one forward pass run under torch.profiler, its self time per aten op
summed into groups (dense layers, attention products, softmax, MLM loss, the rest). Module-level functions returning
a dict, so that `isolation.run_isolated` can run each in a fresh process."""

import time
from collections.abc import Callable

import torch

from blockbert_benchmarks.measuring.timing import synchronized

from .models import BERT_BASE, CANDIDATES, ModelSize, build_benchmark_model
from .workloads import make_training_step, masked_lm_with_adamw, seeded_inputs


# Which aten ops do which part of a step's or a forward's work (self time, so nested ops are not counted twice).
STEP_PROFILE_GROUPS = {
    "dense layers and MLM head (mm, addmm)": ("aten::mm", "aten::addmm"),
    "attention products (bmm, baddbmm, fused SDPA)": (
        "aten::bmm",
        "aten::baddbmm",
        "aten::_scaled_dot_product_flash_attention_for_cpu",
        "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
    ),
    "attention softmax and its gradient": ("aten::_softmax", "aten::_softmax_backward_data"),
    "MLM loss (log-softmax over the vocabulary)": ("aten::_log_softmax", "aten::_log_softmax_backward_data"),
}
OTHER_OPS_GROUP = "everything else (dropout, GELU, layer norm, elementwise, copies, AdamW)"


def _profile_call(call: Callable, device: str) -> dict:
    """Runs `call` once under torch.profiler: its wall time, the self time per aten op (seconds) and the op groups."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if torch.device(device).type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        start = time.perf_counter()
        call()
        step_s = time.perf_counter() - start
    time_field = "self_device_time_total" if torch.device(device).type == "cuda" else "self_cpu_time_total"
    ops = {event.key: getattr(event, time_field) / 1e6 for event in prof.key_averages()}
    ops = {name: seconds for name, seconds in ops.items() if seconds > 0}
    groups = {group: sum(ops.get(name, 0.0) for name in names) for group, names in STEP_PROFILE_GROUPS.items()}
    grouped_names = {name for names in STEP_PROFILE_GROUPS.values() for name in names}
    groups[OTHER_OPS_GROUP] = sum(seconds for name, seconds in ops.items() if name not in grouped_names)
    return dict(step_s=step_s, profiled_s=sum(ops.values()), groups=groups, ops=ops)


def profile_training_step(
    candidate_key: str,
    batch_size: int,
    seq_len: int,
    size: ModelSize = BERT_BASE,
    attention_dropout: float = 0.1,
    device: str = "cpu",
) -> dict:
    """Where the time of one AdamW step of a `*ForMaskedLM` goes: torch.profiler's self time per aten op (seconds),
    summed into `STEP_PROFILE_GROUPS`, after a warm-up step. One profiled step: read the shares, not the totals."""
    model, optimizer = masked_lm_with_adamw(candidate_key, seq_len, size, attention_dropout, device)
    input_ids, labels = (x.to(device) for x in seeded_inputs(batch_size, seq_len, size.vocab_size))
    step = synchronized(make_training_step(model, optimizer, input_ids, labels), device)
    step()
    return _profile_call(step, device)


def profile_forward(
    candidate_key: str, batch_size: int, seq_len: int, size: ModelSize = BERT_BASE, device: str = "cpu"
) -> dict:
    """`profile_training_step` for one `*Model` forward in inference mode (after a warm-up forward)."""
    model = build_benchmark_model(CANDIDATES[candidate_key], seq_len, size).to(device).eval()
    input_ids = seeded_inputs(batch_size, seq_len, size.vocab_size)[0].to(device)

    def forward():
        with torch.inference_mode():
            model(input_ids=input_ids)

    forward = synchronized(forward, device)
    forward()
    return _profile_call(forward, device)
