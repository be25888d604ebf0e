"""What the benchmarks in `benchmarks/` share: the compared models, memory measurement (a fresh process per
measurement), interleaved timing with same-run ratios, profiles, and the results files (markdown, JSON, PNG)."""

import contextlib
import datetime
import gc
import json
import multiprocessing
import os
import platform
import resource
import shlex
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
import transformers
from tqdm.auto import tqdm

from .configuration_blockbert import BlockBertConfig
from .saving import write_file_atomically


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
        for name, ratios in ratios_to(results, anchor).items():
            results[name].update(ratios)
    return results


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
    # Bytes still held at the end of the block by tensors allocated inside it (e.g. what a forward keeps for backward).
    retained_bytes: int = 0
    rss_growth_bytes: int | None = None
    method: str = ""


CPU_MEMORY_METHOD = (
    "CPU: torch.profiler(profile_memory=True) records every allocation and free of the c10 CPU allocator; the peak is "
    "the largest sum of bytes held by tensors allocated during the measured call (tensors that existed before it are "
    "not counted, nor are their frees)"
)
CUDA_MEMORY_METHOD = (
    "CUDA: torch.cuda.max_memory_allocated after reset_peak_memory_stats, minus memory_allocated on entry"
)


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
    resident_on_entry = _reset_peak_resident_set()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        yield record
    peak_resident = _resident_set_bytes("VmHWM")
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


@dataclass(frozen=True)
class Candidate:
    """One model of the comparison. `family`: "blockbert" (this package; `num_blocks=1` is its full-attention pattern,
    the paper's RoBERTa-1seq), "roberta" (transformers' RobertaModel), "longformer", "bigbird" (transformers' classes,
    whose attention has only an eager implementation). `sparse_prediction` (BlockBERT only) runs the MLM head on the
    labelled positions alone, as fairseq (the paper's code base) does; its full-attention form is the fair anchor for
    its blockwise forms, since the same head saving would apply to RoBERTa."""

    family: str
    attn_implementation: str = "eager"
    num_blocks: int = 1
    sparse_prediction: bool = False

    @property
    def key(self) -> str:
        if self.family == "blockbert":
            blocks = "full" if self.num_blocks == 1 else f"n{self.num_blocks}"
            sparse = "-sparse" if self.sparse_prediction else ""
            return f"blockbert-{blocks}-{self.attn_implementation}{sparse}"
        if self.family == "roberta":
            return f"roberta-{self.attn_implementation}"
        return self.family

    @property
    def label(self) -> str:
        if self.family == "blockbert":
            blocks = "full" if self.num_blocks == 1 else f"n={self.num_blocks}"
            sparse = ", masked-only MLM logits" if self.sparse_prediction else ""
            return f"BlockBERT {blocks} ({self.attn_implementation}{sparse})"
        return {"roberta": "RoBERTa", "longformer": "Longformer", "bigbird": "BigBird"}[self.family] + (
            f" ({self.attn_implementation})"
        )


CANDIDATES = {
    candidate.key: candidate
    for candidate in [
        *(Candidate("blockbert", kernel, n) for n in (2, 3, 4) for kernel in ("eager", "sdpa")),
        Candidate("blockbert", "eager", 1),
        Candidate("blockbert", "sdpa", 1),
        *(Candidate("blockbert", "sdpa", n, sparse_prediction=True) for n in (1, 2, 3)),
        Candidate("roberta", "eager"),
        Candidate("roberta", "sdpa"),
        Candidate("longformer"),
        Candidate("bigbird"),
    ]
}


def parse_candidates(keys: list[str] | str) -> list[Candidate]:
    """`["blockbert-n2-sdpa", "roberta-eager", ...]` (or one comma-separated string) -> candidates, in that order."""
    if isinstance(keys, str):
        keys = [key for key in keys.split(",") if key]
    unknown = [key for key in keys if key not in CANDIDATES]
    if unknown or not keys:
        raise ValueError(f"Unknown model keys {unknown or keys}: choose among {', '.join(CANDIDATES)}.")
    return [CANDIDATES[key] for key in keys]


def parse_grid(text: str) -> list[tuple[int, int]]:
    """`"8x1024,2x4096"` -> [(8, 1024), (2, 4096)] (batch size x sequence length)."""
    grid = []
    for item in text.split(","):
        parts = item.strip().lower().split("x")
        if len(parts) != 2 or not all(part.isdigit() and int(part) > 0 for part in parts):
            raise ValueError(
                f"Grid item {item!r} is not BATCHxLENGTH: write positive integers such as '8x1024,2x4096'."
            )
        grid.append((int(parts[0]), int(parts[1])))
    return grid


@dataclass(frozen=True)
class ModelSize:
    """Dimensions shared by every candidate (BERT-base by default; `tiny()` for quick runs and tests)."""

    num_layers: int = 12
    hidden_size: int = 768
    num_heads: int = 12
    intermediate_size: int = 3072
    vocab_size: int = 30522
    longformer_window: int = 512
    bigbird_block_size: int = 64
    bigbird_random_blocks: int = 3

    def describe(self) -> str:
        return (
            f"{self.num_layers} layers, hidden {self.hidden_size}, {self.num_heads} heads, FFN "
            f"{self.intermediate_size}, vocab {self.vocab_size}"
        )

    @classmethod
    def tiny(cls) -> "ModelSize":
        return cls(
            num_layers=2,
            hidden_size=64,
            num_heads=4,
            intermediate_size=128,
            vocab_size=512,
            longformer_window=32,
            bigbird_block_size=16,
            bigbird_random_blocks=1,
        )


def build_benchmark_model(
    candidate: Candidate,
    seq_len: int,
    size: ModelSize = ModelSize(),
    masked_lm: bool = False,
    attention_dropout: float = 0.1,
    hidden_dropout: float = 0.1,
) -> torch.nn.Module:
    """A randomly initialised `*Model` (or `*ForMaskedLM` when `masked_lm`) of `candidate` for inputs of up to
    `seq_len` tokens, every family at the same dimensions."""
    if candidate.sparse_prediction and candidate.family != "blockbert":
        raise ValueError("sparse_prediction is a BlockBERT option; transformers' other models have no such switch.")
    if candidate.family in ("longformer", "bigbird") and candidate.attn_implementation != "eager":
        raise ValueError(f"{candidate.family} has only an eager attention implementation in transformers.")
    common = dict(
        vocab_size=size.vocab_size,
        hidden_size=size.hidden_size,
        num_hidden_layers=size.num_layers,
        num_attention_heads=size.num_heads,
        intermediate_size=size.intermediate_size,
        hidden_act="gelu",
        hidden_dropout_prob=hidden_dropout,
        attention_probs_dropout_prob=attention_dropout,
        max_position_embeddings=seq_len + 2,
        type_vocab_size=1,
        layer_norm_eps=1e-5,
    )
    if candidate.family == "blockbert":
        from .modeling_blockbert import BlockBertForMaskedLM, BlockBertModel

        pattern = "full" if candidate.num_blocks == 1 else "blockwise"
        config = bert_base_config(
            seq_len,
            **common,
            attention_pattern=pattern,
            num_blocks=candidate.num_blocks,
            sparse_prediction=candidate.sparse_prediction,
        )
        model = BlockBertForMaskedLM(config) if masked_lm else BlockBertModel(config, add_pooling_layer=False)
    elif candidate.family == "roberta":
        from transformers import RobertaConfig, RobertaForMaskedLM, RobertaModel

        config = RobertaConfig(**common)
        model = RobertaForMaskedLM(config) if masked_lm else RobertaModel(config, add_pooling_layer=False)
    elif candidate.family == "longformer":
        from transformers import LongformerConfig, LongformerForMaskedLM, LongformerModel

        config = LongformerConfig(**common, attention_window=size.longformer_window)
        model = LongformerForMaskedLM(config) if masked_lm else LongformerModel(config, add_pooling_layer=False)
    elif candidate.family == "bigbird":
        from transformers import BigBirdConfig, BigBirdForMaskedLM, BigBirdModel

        config = BigBirdConfig(
            **common,
            attention_type="block_sparse",
            block_size=size.bigbird_block_size,
            num_random_blocks=size.bigbird_random_blocks,
        )
        model = BigBirdForMaskedLM(config) if masked_lm else BigBirdModel(config, add_pooling_layer=False)
    else:
        raise ValueError(
            f"Unknown model family {candidate.family!r}: use one of blockbert, roberta, longformer, bigbird."
        )
    if candidate.family in ("blockbert", "roberta"):
        model.set_attn_implementation(candidate.attn_implementation)
    return model


def attention_actually_used(model: torch.nn.Module) -> str | None:
    """BigBird silently switches from block-sparse to full attention for inputs of at most
    `(5 + 2 * num_random_blocks) * block_size` tokens; this says which one the last forward ran (None for other
    models)."""
    base = getattr(model, "base_model", model)
    return getattr(base, "attention_type", None) if type(base).__name__.startswith("BigBird") else None


def share_parameters(donor: torch.nn.Module, recipient: torch.nn.Module) -> None:
    """Makes `recipient` use `donor`'s parameter objects, name by name (models of the same architecture, e.g. a
    BlockBERT and a RoBERTa of the same size), so that timing many models in one process holds one copy of weights,
    gradients and optimizer state. Raises if the two do not have the same parameter names and shapes."""
    donated = dict(donor.named_parameters(remove_duplicate=False))
    own = dict(recipient.named_parameters(remove_duplicate=False))
    mismatched = sorted(set(donated) ^ set(own)) + [
        name for name in own if name in donated and own[name].shape != donated[name].shape
    ]
    if mismatched:
        raise ValueError(f"Cannot share parameters: names or shapes differ at {mismatched[:5]}.")
    for name, parameter in donated.items():
        module_name, _, attribute = name.rpartition(".")
        setattr(recipient.get_submodule(module_name), attribute, parameter)


def random_token_ids(batch_size: int, seq_len: int, vocab_size: int, generator=None) -> torch.Tensor:
    """Token ids that avoid the special ids (0-4) of every family, so no position is taken for padding."""
    return torch.randint(5, vocab_size, (batch_size, seq_len), generator=generator)


def masked_lm_labels(input_ids: torch.Tensor, fraction: float = 0.15, generator=None) -> torch.Tensor:
    """MLM labels as a collator would make them: the token id at a random `fraction` of positions, -100 elsewhere."""
    chosen = torch.rand(input_ids.shape, generator=generator) < fraction
    return torch.where(chosen, input_ids, torch.full_like(input_ids, -100))


def make_training_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, input_ids, labels) -> Callable:
    """One optimizer step of a `*ForMaskedLM` model. Gradients are released at the end of the step, so that a step
    starts with only weights and optimizer state allocated (the state in which the paper measures a step)."""

    def step():
        loss = model(input_ids=input_ids, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


# --- measurements that run in a fresh process each (see run_isolated) ------------------------------------------------


def _seeded_inputs(batch_size: int, seq_len: int, vocab_size: int, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    input_ids = random_token_ids(batch_size, seq_len, vocab_size, generator)
    return input_ids, masked_lm_labels(input_ids, generator=generator)


def measure_forward(
    candidate_key: str, batch_size: int, seq_len: int, size: ModelSize = ModelSize(), device: str = "cpu"
) -> dict:
    """Peak memory of one `*Model` forward pass (inference mode) above the weights, and how long that (profiled)
    forward took: the time says whether the candidate is too slow to time, the memory is the measurement."""
    candidate = CANDIDATES[candidate_key]
    model = build_benchmark_model(candidate, seq_len, size).to(device).eval()
    input_ids, _ = _seeded_inputs(batch_size, seq_len, size.vocab_size)
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


def _masked_lm_with_adamw(candidate_key: str, seq_len: int, size: ModelSize, attention_dropout: float, device: str):
    model = build_benchmark_model(
        CANDIDATES[candidate_key], seq_len, size, masked_lm=True, attention_dropout=attention_dropout
    )
    model = model.to(device).train()
    return model, torch.optim.AdamW(model.parameters(), lr=1e-5)


def measure_training_step(
    candidate_key: str,
    batch_size: int,
    seq_len: int,
    size: ModelSize = ModelSize(),
    attention_dropout: float = 0.1,
    device: str = "cpu",
) -> dict:
    """The paper's memory decomposition (Appendix A.2) of one AdamW step of a `*ForMaskedLM`: model memory (weights),
    optimizer memory (Adam state, present after a warm-up step on one sequence of the same length), and
    activation memory = the step's peak above those two (activations, gradients, temporaries)."""
    model, optimizer = _masked_lm_with_adamw(candidate_key, seq_len, size, attention_dropout, device)
    warmup_ids, warmup_labels = (x[:1].to(device) for x in _seeded_inputs(1, seq_len, size.vocab_size, seed=1))
    make_training_step(model, optimizer, warmup_ids, warmup_labels)()
    input_ids, labels = (x.to(device) for x in _seeded_inputs(batch_size, seq_len, size.vocab_size))
    step = make_training_step(model, optimizer, input_ids, labels)
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
    size: ModelSize = ModelSize(),
    attention_dropout: float = 0.1,
    device: str = "cpu",
) -> dict:
    """Where the time of one AdamW step of a `*ForMaskedLM` goes: torch.profiler's self time per aten op (seconds),
    summed into `STEP_PROFILE_GROUPS`, after a warm-up step. One profiled step: read the shares, not the totals."""
    model, optimizer = _masked_lm_with_adamw(candidate_key, seq_len, size, attention_dropout, device)
    input_ids, labels = (x.to(device) for x in _seeded_inputs(batch_size, seq_len, size.vocab_size))
    step = synchronized(make_training_step(model, optimizer, input_ids, labels), device)
    step()
    return _profile_call(step, device)


def profile_forward(
    candidate_key: str, batch_size: int, seq_len: int, size: ModelSize = ModelSize(), device: str = "cpu"
) -> dict:
    """`profile_training_step` for one `*Model` forward in inference mode (after a warm-up forward)."""
    model = build_benchmark_model(CANDIDATES[candidate_key], seq_len, size).to(device).eval()
    input_ids = _seeded_inputs(batch_size, seq_len, size.vocab_size)[0].to(device)

    def forward():
        with torch.inference_mode():
            model(input_ids=input_ids)

    forward = synchronized(forward, device)
    forward()
    return _profile_call(forward, device)


def _is_out_of_memory(error: BaseException) -> bool:
    return isinstance(error, (MemoryError, torch.OutOfMemoryError)) or (
        isinstance(error, RuntimeError) and "can't allocate memory" in str(error)
    )


def _isolated_main(connection, function, kwargs, memory_budget_bytes, threads):

    torch.set_num_threads(threads)
    if memory_budget_bytes is not None:
        # Address-space limit: an allocation past the budget fails in this process (a clean "out of memory") instead
        # of waking the kernel's OOM killer, which may pick another process of the machine.
        virtual = _resident_set_bytes("VmSize")
        if virtual is not None:
            limit = virtual + memory_budget_bytes
            resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
    try:
        result = {"status": "ok", **function(**kwargs)}
    except BaseException as error:  # reported to the parent, which decides
        status = "out of memory" if _is_out_of_memory(error) else "error"
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
        if _is_out_of_memory(error):
            return {"status": "out of memory", "detail": f"{type(error).__name__}: {error}"[:500]}
        raise


def synchronized(function: Callable, device: str | torch.device) -> Callable:
    """`function` followed by a CUDA synchronisation when `device` is a GPU, so that wall-clock timing covers the
    kernels and not only their launch."""
    if torch.device(device).type != "cuda":
        return function

    def run():
        function()
        torch.cuda.synchronize(device)

    return run


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


# --- timing, fitting, reporting --------------------------------------------------------------------------------------


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


def fit_line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares `y = slope * x + intercept`; needs at least two distinct x."""
    if len(xs) != len(ys) or len(set(xs)) < 2:
        raise ValueError(f"A line fit needs at least two points with distinct x, got x = {list(xs)}.")
    fit = statistics.linear_regression(xs, ys)
    return fit.slope, fit.intercept


def machine_description() -> str:
    """CPU model, cores, threads used, memory, GPU and library versions: the line each results file starts with."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            cpu = next(line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    memory = ""
    try:
        with open("/proc/meminfo") as meminfo:
            memory = f", {int(meminfo.readline().split()[1]) / 2**20:.0f} GiB RAM"
    except (OSError, ValueError, IndexError):
        pass
    gpu = f", GPU {torch.cuda.get_device_name()}" if torch.cuda.is_available() else ", no GPU"
    return (
        f"{cpu} ({os.cpu_count()} logical CPUs visible, torch uses {torch.get_num_threads()} threads){memory}{gpu}; "
        f"Python {platform.python_version()}, torch {torch.__version__}, transformers {transformers.__version__}"
    )


def markdown_table(headers: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


# --- what the three benchmark scripts share: command line, output folder, results files ------------------------------


def add_run_arguments(parser, default_output_dir) -> None:
    """The options every efficiency benchmark takes."""
    parser.add_argument(
        "--threads",
        type=int,
        help="torch threads (default 2, as the issue's CPU targets; 1 with --quick, whose tiny "
        "operations only wait on each other with more)",
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cpu", "cuda"])
    parser.add_argument(
        "--output_dir",
        help=f"folder for the .json, .md and .png results (default: {default_output_dir}; with --quick a new "
        "temporary folder, so that a quick run never overwrites real results)",
    )
    parser.add_argument(
        "--memory_budget_gb",
        type=float,
        help="CPU: the most memory one measurement may take above an idle Python process; a measurement that needs "
        "more is recorded as out of memory (default: 90%% of the memory available when the run starts)",
    )
    parser.add_argument(
        "--in_process",
        action="store_true",
        help="measure memory in this process instead of a fresh process per measurement (faster, but a measurement "
        "that exhausts memory can take the whole run down; --quick implies it)",
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks that the script works, in seconds")


def prepare_run(args, default_output_dir) -> Path:
    """Checks the common options, sets the thread count, and returns the output folder (created)."""

    if args.threads is None:
        args.threads = 1 if args.quick else 2
    if args.threads < 1:
        raise ValueError(f"--threads must be at least 1, got {args.threads}.")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda was asked for but torch sees no CUDA device: use --device cpu.")
    if args.memory_budget_gb is not None and args.memory_budget_gb <= 0:
        raise ValueError(f"--memory_budget_gb must be positive, got {args.memory_budget_gb}.")
    torch.set_num_threads(args.threads)
    if args.quick:
        args.in_process = True
    args.memory_budget_bytes = None
    if args.device == "cpu":  # an address-space cap would break CUDA's large virtual mappings
        available = available_memory_bytes()
        if args.memory_budget_gb is not None:
            args.memory_budget_bytes = int(args.memory_budget_gb * GIB)
        elif available is not None:
            args.memory_budget_bytes = int(0.9 * available)
    if args.output_dir is None:
        args.output_dir = tempfile.mkdtemp(prefix="blockbert-benchmark-quick-") if args.quick else default_output_dir
    output_dir = Path(args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    return output_dir


def results_header(title: str, script: str, argv: list[str], notes: list[str]) -> str:
    """Title, the command that produced the file, date, machine, and notes: the top of every results markdown."""

    command = " ".join(["python", script, *(shlex.quote(argument) for argument in argv)])
    lines = [
        f"# {title}",
        "",
        f"Produced by `{command}` on {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC.",
        "",
        f"Machine: {machine_description()}.",
        "",
    ]
    lines += [f"- {note}" for note in notes]
    return "\n".join(lines) + "\n\n"


def gib(num_bytes: float | None) -> str:
    return "" if num_bytes is None else f"{num_bytes / GIB:.3f}"


# --- comparisons of many models over a grid of (batch, length): benchmarks/inference.py and train_step.py ------------


def add_comparison_arguments(
    parser, default_output_dir, default_grid: str, default_models: str, too_slow_s: float, call: str
) -> None:
    """The options of inference.py and train_step.py (`call`: "forward" or "step", for the help texts)."""
    parser.add_argument("--grid", default=default_grid, help="comma-separated BATCHxLENGTH")
    parser.add_argument("--models", default=default_models, help="comma-separated model keys")
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--longformer_window", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds (the issue asks for at least 5)")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument(
        "--too_slow_s", type=float, default=too_slow_s, help=f"a model whose {call} takes longer: not timed"
    )
    parser.add_argument("--skip_timing", action="store_true", help="measure memory only (no timing pass)")
    add_run_arguments(parser, default_output_dir)


def check_comparison_arguments(parser, args) -> None:
    """Parses and checks what `add_comparison_arguments` added (errors through `parser.error`); --quick shrinks the
    grid and the rounds."""
    if args.quick:
        args.grid, args.repeats, args.warmup = "1x128", 2, 1
    try:
        args.grid = parse_grid(args.grid)
        args.candidates = parse_candidates(args.models)
    except ValueError as error:
        parser.error(str(error))
    if args.repeats < 1 or args.warmup < 0 or args.layers < 1:
        parser.error("--repeats and --layers must be at least 1, --warmup at least 0")
    if args.longformer_window < 2 or args.longformer_window % 2:
        parser.error(f"--longformer_window must be an even number (Longformer's rule), got {args.longformer_window}")


def comparison_size(args) -> ModelSize:
    if args.quick:
        return ModelSize.tiny()
    return ModelSize(num_layers=args.layers, longformer_window=args.longformer_window)


def other_families_note(size: ModelSize) -> str:
    """How Longformer and BigBird are configured, for the notes of a results file."""
    return (
        f"Longformer: window {size.longformer_window}, no global attention. BigBird: block sparse, block "
        f"{size.bigbird_block_size}, {size.bigbird_random_blocks} random blocks (it switches to full attention for "
        f"inputs of at most {(5 + 2 * size.bigbird_random_blocks) * size.bigbird_block_size} tokens)."
    )


def build_models_sharing_weights(
    candidates: list[Candidate], seq_len: int, size: ModelSize, device, **build_kwargs
) -> dict[str, torch.nn.Module]:
    """`build_benchmark_model` for every candidate; the BlockBERT and RoBERTa models (same parameter names and shapes)
    all use the first one's parameter objects, so a process timing a dozen of them holds one copy of the weights."""
    models, donor = {}, None
    for candidate in candidates:
        model = build_benchmark_model(candidate, seq_len, size, **build_kwargs).to(device)
        if candidate.family in ("blockbert", "roberta"):
            if donor is None:
                donor = model
            else:
                share_parameters(donor, model)
        models[candidate.key] = model
    return models


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


def timing_pass(runners: dict[str, Callable], repeats: int, warmup: int, device) -> dict:
    """`interleaved_medians` over the runners (synchronised on CUDA), with ratios to every anchor among them."""
    results = interleaved_medians({key: synchronized(run, device) for key, run in runners.items()}, repeats, warmup)
    for anchor in pick_anchors(list(results)):
        for key, ratios in ratios_to(results, anchor).items():
            results[key].setdefault("ratios", {})[anchor] = ratios
    return results


def comparison_table(candidates: list[Candidate], rows: dict, memory_field: str, memory_title: str) -> str:
    """One markdown table: status, memory, median time and same-run ratios to the anchors, per candidate."""
    anchors = pick_anchors([key for key, row in rows.items() if row.get("median_s") is not None])
    memory_anchor = next((a for a in pick_anchors(list(rows)) if rows[a].get(memory_field) is not None), None)
    headers = ["model", memory_title, "median time (s)"]
    headers += [f"time / {CANDIDATES[a].label} (paired; of medians)" for a in anchors]
    headers += [f"memory / {CANDIDATES[memory_anchor].label}"] if memory_anchor else []
    headers += ["note"]
    table = []
    for candidate in candidates:
        row = rows[candidate.key]
        cells = [candidate.label, gib(row.get(memory_field))]
        cells.append(f"{row['median_s']:.3f}" if row.get("median_s") is not None else "")
        for anchor in anchors:
            ratio = row.get("ratios", {}).get(anchor)
            cells.append(f"{ratio['median_paired_ratio']:.3f}; {ratio['ratio_of_medians']:.3f}" if ratio else "")
        if memory_anchor:
            mine, theirs = row.get(memory_field), rows[memory_anchor][memory_field]
            cells.append(f"{mine / theirs:.3f}" if mine is not None else "")
        note = "" if row["status"] == "ok" else row["status"] + (f" ({row['detail']})" if row.get("detail") else "")
        if row.get("attention_used") == "original_full":
            note = (note + "; " if note else "") + "BigBird ran full attention (input too short for block sparse)"
        cells.append(note)
        table.append(cells)
    return markdown_table(headers, table)


def targets_table(targets: list[dict], sections: list[dict]) -> str:
    """The issue's performance targets, each with the same-run ratio measured here (median of paired rounds) and
    whether it holds. A target is `{"what", "section": {field: value, ...}, "model", "anchor", "at_most",
    "kind": "time" | "memory", "memory_field"}`."""
    table = []
    for target in targets:
        section = next((s for s in sections if all(s.get(k) == v for k, v in target["section"].items())), None)
        measured = None
        if section is not None and target["model"] in section["rows"] and target["anchor"] in section["rows"]:
            row, anchor = section["rows"][target["model"]], section["rows"][target["anchor"]]
            # Any two models timed in the same run pair up, whether or not the tables show ratios to the anchor.
            if target["kind"] == "time" and row.get("times_s") and anchor.get("times_s"):
                measured = median_paired_ratio(row["times_s"], anchor["times_s"])
            elif target["kind"] == "memory" and row.get(target["memory_field"]) and anchor.get(target["memory_field"]):
                measured = row[target["memory_field"]] / anchor[target["memory_field"]]
        verdict = "not measured" if measured is None else ("yes" if measured <= target["at_most"] else "NO")
        table.append(
            [
                target["what"],
                f"{CANDIDATES[target['model']].label} / {CANDIDATES[target['anchor']].label}",
                f"<= {target['at_most']}",
                "" if measured is None else f"{measured:.3f}",
                verdict,
            ]
        )
    return markdown_table(["target", "ratio", "required", "measured", "met"], table)


def comparison_plot(sections: list[dict], candidates: list[Candidate], memory_field: str, title: str, path) -> None:
    """Grouped bars, one group per section (grid point): median time (top) and peak memory (bottom)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (time_axes, memory_axes) = plt.subplots(2, 1, figsize=(max(9, 2.2 * len(sections) + 6), 8), sharex=True)
    width = 0.8 / max(1, len(candidates))
    for index, candidate in enumerate(candidates):
        xs = [group + (index - (len(candidates) - 1) / 2) * width for group in range(len(sections))]
        times = [s["rows"][candidate.key].get("median_s") or 0.0 for s in sections]
        memory = [(s["rows"][candidate.key].get(memory_field) or 0.0) / GIB for s in sections]
        color = plt.get_cmap("tab20")(index % 20)  # a dozen models: more than the default cycle's 10 colours
        hatch = "//" if candidate.attn_implementation == "sdpa" else None
        time_axes.bar(xs, times, width, label=candidate.label, color=color, hatch=hatch)
        memory_axes.bar(xs, memory, width, color=color, hatch=hatch)
    time_axes.set_ylabel("median time (s)")
    memory_axes.set_ylabel("peak memory (GiB)")
    memory_axes.set_xticks(range(len(sections)), [s["name"] for s in sections])
    time_axes.set_title(title + " (missing bar: out of memory, too slow, or not run)")
    time_axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    for axes in (time_axes, memory_axes):
        axes.grid(axis="y", alpha=0.3)
    figure.tight_layout()
    write_file_atomically(path, lambda temporary: figure.savefig(temporary, format="png", dpi=120))
    plt.close(figure)


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
    runners = None
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
        runners = None
        gc.collect()
    return rows


def write_report(
    output_dir: Path,
    stem: str,
    header: str,
    targets: list[dict],
    sections: list[dict],
    args,
    memory_title: str,
    plot_title: str,
) -> int:
    """Writes `{stem}.json`, `{stem}.md` (the targets table first, for BERT-base runs) and `{stem}.png`; prints the
    markdown; returns 1 when a measurement failed, else 0."""
    text = header
    if not args.quick and args.layers == 12:  # the targets are stated for BERT-base
        text += "## Issue targets (BlockBERT with the sdpa kernel)\n\n" + targets_table(targets, sections) + "\n"
    for section in sections:
        text += f"## {section['name']}\n\n"
        text += comparison_table(args.candidates, section["rows"], "peak_bytes", memory_title)
        text += "\n"
    write_file_atomically(
        output_dir / f"{stem}.json",
        json.dumps(
            {"args": {k: v for k, v in vars(args).items() if k != "candidates"}, "sections": sections},
            indent=2,
            default=str,
        ),
    )
    write_file_atomically(output_dir / f"{stem}.md", text)
    comparison_plot(sections, args.candidates, "peak_bytes", plot_title, output_dir / f"{stem}.png")
    print(text)
    print(f"wrote {output_dir}/{stem}.{{json,md,png}}")
    failed = [key for s in sections for key, row in s["rows"].items() if row["status"] in ("error", "timing failed")]
    if failed:
        print(f"measurements failed: {failed} (see the .md file)", file=sys.stderr)
        return 1
    return 0
