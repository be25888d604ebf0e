"""Time and peak memory of one training step (the efficiency columns of the paper's Table 3): BlockBERT against
RoBERTa, Longformer and BigBird, with attention dropout 0.1 (as the paper) and 0.

    python benchmarks/train_step.py            # BERT-base, 8x512 and 4x1024, dropout 0.1 and 0
    python benchmarks/train_step.py --grid 4x1024 --attention_dropouts 0.1    # the targets only
    python benchmarks/train_step.py --quick    # tiny sizes, checks that the script works

A run's time grows with the models, the grid points, the attention dropouts and the rounds (--warmup + --repeats
steps per model each), and falls with the threads; the step times of a run are in its train_step.md.

A step is forward + backward + AdamW update of a `*ForMaskedLM` (15% of positions labelled), gradients released
at its end. For every batch x length of --grid and every attention dropout:
1. memory: each model in a fresh process, a warm-up step on one sequence (so Adam's state exists), then the measured
   step: peak = weights + Adam state + the step's peak allocation above them (paper Appendix A.2). A model that exceeds
   --memory_budget_gb is recorded as out of memory, one whose step takes longer than --too_slow_s as too slow.
2. time: all other models in this one process, interleaved (--warmup steps each, then --repeats rounds of one step
   per model), medians and same-run ratios. BlockBERT and RoBERTa models share one set of weights and one AdamW
   (same parameter names and shapes), so the process holds one copy; Longformer and BigBird have their own.

Note: torch's CPU SDPA has no fused kernel with dropout; with dropout > 0 it falls back to the math kernel, which
stores the attention probabilities like eager attention does. Writes train_step.{json,md,png}.
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
from blockbert_benchmarks.measurements import measure_training_step
from blockbert_benchmarks.models import build_models_sharing_weights, other_families_note
from blockbert_benchmarks.reporting import results_header, write_report
from blockbert_benchmarks.workloads import make_training_step, masked_lm_labels, random_token_ids


DEFAULT_OUTPUT_DIR = Path(__file__).resolve().parents[1] / "results" / "benchmarks"
DEFAULT_MODELS = (
    "blockbert-n2-eager,blockbert-n2-sdpa,blockbert-n3-eager,blockbert-n3-sdpa,roberta-eager,roberta-sdpa,longformer,"
    "bigbird,blockbert-full-sdpa-sparse,blockbert-n2-sdpa-sparse"
)
PRECISION = {"float32": "fp32", "bfloat16": "bf16 autocast (fp32 weights and AdamW state)"}
_AT_TARGET = dict(batch_size=4, seq_len=1024, attention_dropout=0.1)
# Training targets: peak memory against the paper's Table 3 ratios, step time as same-run ratios.
TARGETS = [
    dict(
        what="training peak memory, paper 0.73",
        section=_AT_TARGET,
        model="blockbert-n2-sdpa",
        anchor="roberta-eager",
        at_most=0.73,
        kind="memory",
        memory_field="peak_bytes",
    ),
    dict(
        what="training peak memory, paper 0.64",
        section=_AT_TARGET,
        model="blockbert-n3-sdpa",
        anchor="roberta-eager",
        at_most=0.64,
        kind="memory",
        memory_field="peak_bytes",
    ),
    dict(
        what="training step time",
        section=_AT_TARGET,
        model="blockbert-n2-sdpa",
        anchor="roberta-sdpa",
        at_most=0.85,
        kind="time",
    ),
    dict(
        what="training peak memory",
        section=_AT_TARGET,
        model="blockbert-n2-sdpa",
        anchor="roberta-sdpa",
        at_most=1.0,
        kind="memory",
        memory_field="peak_bytes",
    ),
    # The same time target with the MLM head on labelled positions only (fairseq's, hence the paper's, setting):
    # against the full-attention model with the same head (the fair anchor) and against transformers' RoBERTa.
    dict(
        what="training step time, masked-only MLM logits in both",
        section=_AT_TARGET,
        model="blockbert-n2-sdpa-sparse",
        anchor="blockbert-full-sdpa-sparse",
        at_most=0.85,
        kind="time",
    ),
    dict(
        what="training step time, masked-only MLM logits in BlockBERT only",
        section=_AT_TARGET,
        model="blockbert-n2-sdpa-sparse",
        anchor="roberta-sdpa",
        at_most=0.85,
        kind="time",
    ),
]


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--attention_dropouts", default="0.1,0", help="comma-separated attention dropout rates")
    add_comparison_arguments(parser, DEFAULT_OUTPUT_DIR, "8x512,4x1024", DEFAULT_MODELS, 600, "step")
    args = parser.parse_args(argv)
    check_comparison_arguments(parser, args)
    try:
        args.attention_dropouts = [float(value) for value in args.attention_dropouts.split(",")]
    except ValueError as error:
        parser.error(str(error))
    if not all(0 <= p < 1 for p in args.attention_dropouts):
        parser.error(f"--attention_dropouts must be in [0, 1), got {args.attention_dropouts}")
    return args


def build_runners(candidates, batch_size, seq_len, size, attention_dropout, device, autocast_dtype=None):
    """One training-step callable per model; models that share weights (BlockBERT, RoBERTa) share one AdamW too.
    `autocast_dtype` ("bfloat16"): mixed precision (see `make_training_step`)."""
    generator = torch.Generator().manual_seed(0)
    input_ids = random_token_ids(batch_size, seq_len, size.vocab_size, generator)
    labels = masked_lm_labels(input_ids, generator=generator)
    input_ids, labels = input_ids.to(device), labels.to(device)
    models = build_models_sharing_weights(
        candidates, seq_len, size, device, masked_lm=True, attention_dropout=attention_dropout
    )
    runners, optimizers = {}, {}  # one AdamW per set of parameter objects
    for key, model in models.items():
        weights = id(next(model.parameters()))
        if weights not in optimizers:
            optimizers[weights] = torch.optim.AdamW(model.parameters(), lr=1e-5)
        runners[key] = make_training_step(model.train(), optimizers[weights], input_ids, labels, autocast_dtype)
    return runners


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    output_dir = prepare_run(args, DEFAULT_OUTPUT_DIR)
    size = comparison_size(args)
    sections = []
    jobs = [(p, b, n) for p in args.attention_dropouts for b, n in args.grid]
    autocast_dtype = None if args.dtype == "float32" else args.dtype
    for attention_dropout, batch_size, seq_len in tqdm(jobs, desc="grid", unit="point"):
        name = f"{batch_size}x{seq_len}, attention dropout {attention_dropout:g}"
        rows = measure_section(
            args.candidates,
            measure_training_step,
            dict(
                batch_size=batch_size,
                seq_len=seq_len,
                size=size,
                attention_dropout=attention_dropout,
                device=args.device,
                autocast_dtype=autocast_dtype,
            ),
            functools.partial(
                build_runners,
                batch_size=batch_size,
                seq_len=seq_len,
                size=size,
                attention_dropout=attention_dropout,
                device=args.device,
                autocast_dtype=autocast_dtype,
            ),
            args,
            name,
        )
        sections.append(
            dict(name=name, batch_size=batch_size, seq_len=seq_len, attention_dropout=attention_dropout, rows=rows)
        )

    notes = [
        f"{'quick mode, tiny model: ' if args.quick else 'BERT-base dims: '}{size.describe()}; "
        f"one AdamW step of `*ForMaskedLM`, {PRECISION[args.dtype]}, hidden dropout 0.1, random weights and tokens, "
        "15% of positions labelled, no padding.",
        f"Time: median of {args.repeats} rounds after {args.warmup} warm-up step(s), all models interleaved in one "
        "process; ratios are same-run: median over rounds of (time / anchor's time in that round), then the ratio of "
        "the medians.",
        "Peak memory = weights + AdamW state + the step's peak allocation above them (activations, gradients, "
        "temporaries), measured after a warm-up step"
        + (", each model in a fresh process." if not args.in_process else "."),
        "torch's CPU SDPA has no fused kernel with dropout: with attention dropout > 0 it runs its math fallback, "
        "which keeps the N x N probabilities like eager attention.",
        other_families_note(size),
    ]
    header = results_header(
        "Training step: time and peak memory (paper Table 3)", "benchmarks/train_step.py", argv, notes
    )
    return write_report(
        output_dir,
        "train_step",
        header,
        TARGETS,
        sections,
        args,
        "peak memory (GiB)",
        "Training step time and peak memory",
    )


if __name__ == "__main__":
    sys.exit(main())
