"""Forward time and peak memory of BlockBERT against RoBERTa, Longformer and BigBird (the paper's Table 6, extended).

    python benchmarks/inference.py           # BERT-base dims, grid 8x1024, 16x1024, 2x4096
    python benchmarks/inference.py --quick   # tiny sizes, checks that the script works

A run takes a fresh process per model and grid point for memory, then (--warmup + --repeats) forwards per model and
grid point: its time grows with the models, the grid and the rounds, and falls with the threads (the forward times of
a run are in its inference.md).

For every batch x length of --grid:
1. memory: one `*Model` forward (inference mode) per model, each in a fresh process: peak allocation above the
   weights. A model that exceeds --memory_budget_gb is recorded as out of memory, one whose forward takes longer
   than --too_slow_s as too slow; neither is timed.
2. time: all other models in this one process, interleaved (--warmup calls each, then --repeats rounds of one call
   per model), medians and same-run ratios. BlockBERT and RoBERTa models share one set of random weights (same
   names and shapes), so the process holds one copy; Longformer and BigBird have their own.

Models (--models): BlockBERT n=2/3/4 and its full pattern (== RoBERTa) with the eager and sdpa kernels, transformers'
RobertaModel (eager, sdpa), LongformerModel (window --longformer_window) and BigBirdModel (block sparse, block 64,
3 random blocks), all at the same dimensions with random weights. Writes inference.{json,md,png}.
"""

import argparse
import functools
import sys
from pathlib import Path

import torch
from tqdm.auto import tqdm

from blockbert_benchmarks.arguments import (
    add_comparison_arguments,
    check_comparison_arguments,
    comparison_size,
    prepare_run,
)
from blockbert_benchmarks.comparison import measure_section
from blockbert_benchmarks.measurements import measure_forward
from blockbert_benchmarks.models import CANDIDATES, build_models_sharing_weights, other_families_note
from blockbert_benchmarks.reporting import results_header, write_report
from blockbert_benchmarks.workloads import random_token_ids


DEFAULT_OUTPUT_DIR = Path(__file__).resolve().parents[1] / "results" / "benchmarks"
# Inference targets: same-run ratios of BlockBERT's forward time to an anchor's (`what` names the paper's figure
# or the FLOP count's bound it is set against).
TARGETS = [
    dict(
        what="inference 8x1024, paper 0.72",
        section=dict(batch_size=8, seq_len=1024),
        model="blockbert-n2-sdpa",
        anchor="roberta-eager",
        at_most=0.62,
        kind="time",
    ),
    dict(
        what="inference 8x1024, FLOP bound 0.91",
        section=dict(batch_size=8, seq_len=1024),
        model="blockbert-n2-sdpa",
        anchor="roberta-sdpa",
        at_most=0.95,
        kind="time",
    ),
    dict(
        what="inference 2x4096, FLOP bound 0.77",
        section=dict(batch_size=2, seq_len=4096),
        model="blockbert-n2-sdpa",
        anchor="roberta-sdpa",
        at_most=0.80,
        kind="time",
    ),
    dict(
        what="inference 2x4096, FLOP bound 0.65",
        section=dict(batch_size=2, seq_len=4096),
        model="blockbert-n4-sdpa",
        anchor="roberta-sdpa",
        at_most=0.70,
        kind="time",
    ),
    dict(
        what="inference 2x4096 vs Longformer (window 512)",
        section=dict(batch_size=2, seq_len=4096),
        model="blockbert-n2-sdpa",
        anchor="longformer",
        at_most=0.60,
        kind="time",
    ),
]


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    # sparse_prediction only changes the MLM head's training loss: nothing to compare in a forward pass. flex_attention
    # compiles its kernel on first use (minutes on a CPU): asked for by name (benchmarks/gpu_efficiency.py runs it).
    forward_models = ",".join(
        key
        for key, candidate in CANDIDATES.items()
        if not candidate.sparse_prediction and candidate.attn_implementation != "flex_attention"
    )
    add_comparison_arguments(parser, DEFAULT_OUTPUT_DIR, "8x1024,16x1024,2x4096", forward_models, 300, "forward")
    args = parser.parse_args(argv)
    check_comparison_arguments(parser, args)
    return args


def build_runners(candidates, batch_size, seq_len, size, device, dtype="float32"):
    """One forward callable per model, weights in `dtype` (BlockBERT and RoBERTa models share one set of weights)."""
    input_ids = random_token_ids(batch_size, seq_len, size.vocab_size, torch.Generator().manual_seed(0)).to(device)
    models = build_models_sharing_weights(candidates, seq_len, size, device, dtype)
    return {key: functools.partial(model.eval(), input_ids=input_ids) for key, model in models.items()}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    output_dir = prepare_run(args, DEFAULT_OUTPUT_DIR)
    size = comparison_size(args)
    sections = []
    for batch_size, seq_len in tqdm(args.grid, desc="grid", unit="point"):
        name = f"batch {batch_size} x length {seq_len}"
        rows = measure_section(
            args.candidates,
            measure_forward,
            dict(batch_size=batch_size, seq_len=seq_len, size=size, device=args.device, dtype=args.dtype),
            functools.partial(
                build_runners,
                batch_size=batch_size,
                seq_len=seq_len,
                size=size,
                device=args.device,
                dtype=args.dtype,
            ),
            args,
            name,
            timing_context=torch.inference_mode,
        )
        sections.append(dict(name=name, batch_size=batch_size, seq_len=seq_len, rows=rows))

    notes = [
        f"{'quick mode, tiny model: ' if args.quick else 'BERT-base dims: '}{size.describe()}; "
        f"`*Model` forward in inference mode, {args.dtype} weights, random weights and tokens, no padding.",
        f"Time: median of {args.repeats} rounds after {args.warmup} warm-up call(s), all models interleaved in one "
        "process; ratios are same-run: median over rounds of (time / anchor's time in that round), then the ratio of "
        "the medians. Only same-run ratios compare; absolute times vary between runs of a shared machine.",
        "Memory: peak allocation of one forward above the weights"
        + (", each model in a fresh process." if not args.in_process else "."),
        other_families_note(size),
    ]
    header = results_header(
        "Inference: forward time and peak memory (paper Table 6)", "benchmarks/inference.py", argv, notes
    )
    return write_report(
        output_dir,
        "inference",
        header,
        TARGETS,
        sections,
        args,
        "peak memory above weights (GiB)",
        "Forward time and peak memory",
    )


if __name__ == "__main__":
    sys.exit(main())
