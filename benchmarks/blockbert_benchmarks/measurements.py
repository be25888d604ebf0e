"""The memory measurements, one model per call: a forward pass, or a training step decomposed as in the paper's
Appendix A.2. They are module-level functions returning a dict, so that `isolation.run_isolated` can run each in a
fresh process."""

import time

import torch

from blockbert_benchmarks.measuring.memory import optimizer_state_bytes, parameter_bytes, track_peak_memory
from blockbert_benchmarks.measuring.timing import synchronized

from .models import BERT_BASE, CANDIDATES, ModelSize, attention_actually_used, build_benchmark_model
from .workloads import make_training_step, masked_lm_with_adamw, seeded_inputs


def measure_forward(
    candidate_key: str,
    batch_size: int,
    seq_len: int,
    size: ModelSize = BERT_BASE,
    device: str = "cpu",
    dtype: str = "float32",
) -> dict:
    """Peak memory of one `*Model` forward pass (inference mode, weights in `dtype`) above the weights, and how long
    that (profiled) forward took: the time says whether the candidate is too slow to time, the memory is the
    measurement."""
    candidate = CANDIDATES[candidate_key]
    model = build_benchmark_model(candidate, seq_len, size).to(device=device, dtype=getattr(torch, dtype)).eval()
    input_ids, _ = seeded_inputs(batch_size, seq_len, size.vocab_size)
    input_ids = input_ids.to(device)
    with torch.inference_mode(), track_peak_memory(device) as memory:
        start = time.perf_counter()
        synchronized(lambda: model(input_ids=input_ids), device)()
        profiled_s = time.perf_counter() - start
    return dict(
        model_bytes=parameter_bytes(model),
        peak_bytes=memory.peak_bytes,
        rss_growth_bytes=memory.rss_growth_bytes,
        memory_method=memory.method,
        profiled_s=profiled_s,
        attention_used=attention_actually_used(model),
    )


def measure_training_step(
    candidate_key: str,
    batch_size: int,
    seq_len: int,
    size: ModelSize = BERT_BASE,
    attention_dropout: float = 0.1,
    device: str = "cpu",
    autocast_dtype: str | None = None,
) -> dict:
    """The paper's memory decomposition (Appendix A.2) of one AdamW step of a `*ForMaskedLM`: model memory (weights),
    optimizer memory (Adam state, present after a warm-up step on one sequence of the same length), and
    activation memory = the step's peak above those two (activations, gradients, temporaries). `autocast_dtype`:
    mixed precision (see `make_training_step`)."""
    model, optimizer = masked_lm_with_adamw(candidate_key, seq_len, size, attention_dropout, device)
    warmup_ids, warmup_labels = (x[:1].to(device) for x in seeded_inputs(1, seq_len, size.vocab_size, seed=1))
    make_training_step(model, optimizer, warmup_ids, warmup_labels, autocast_dtype)()
    input_ids, labels = (x.to(device) for x in seeded_inputs(batch_size, seq_len, size.vocab_size))
    step = make_training_step(model, optimizer, input_ids, labels, autocast_dtype)
    with track_peak_memory(device) as memory:
        start = time.perf_counter()
        synchronized(step, device)()
        profiled_s = time.perf_counter() - start
    model_bytes, optimizer_bytes = parameter_bytes(model), optimizer_state_bytes(optimizer)
    return dict(
        model_bytes=model_bytes,
        optimizer_bytes=optimizer_bytes,
        gradient_bytes=sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad),
        activation_bytes=memory.peak_bytes,
        peak_bytes=model_bytes + optimizer_bytes + memory.peak_bytes,
        rss_growth_bytes=memory.rss_growth_bytes,
        memory_method=memory.method,
        profiled_s=profiled_s,
        attention_used=attention_actually_used(model),
    )
