"""Forward time and peak memory of BlockBERT against RoBERTa, Longformer and BigBird (the paper's Table 6, extended).

    python benchmarks/inference.py           # BERT-base dims, grid 8x1024, 16x1024, 2x4096 (about 75 min on 2 cores)
    python benchmarks/inference.py --quick   # tiny sizes, checks that the script works (seconds)

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
import gc
import json
import sys
from pathlib import Path

import torch
from tqdm.auto import tqdm

from blockbert_hf.benchmarking import (
    CANDIDATES,
    ModelSize,
    add_run_arguments,
    build_benchmark_model,
    comparison_plot,
    comparison_table,
    measure_forward,
    memory_pass,
    parse_candidates,
    parse_grid,
    prepare_run,
    random_token_ids,
    results_header,
    share_parameters,
    targets_table,
    timing_pass,
    write_file_atomically,
)


DEFAULT_OUTPUT_DIR = Path(__file__).resolve().parents[1] / "docs" / "benchmarks"
# The inference targets (ratios of same-run medians; FLOP bounds in the issue text).
TARGETS = [
    dict(what="inference 8x1024, paper 0.72", section=dict(batch_size=8, seq_len=1024), model="blockbert-n2-sdpa",
         anchor="roberta-eager", at_most=0.62, kind="time"),
    dict(what="inference 8x1024, FLOP bound 0.91", section=dict(batch_size=8, seq_len=1024),
         model="blockbert-n2-sdpa", anchor="roberta-sdpa", at_most=0.95, kind="time"),
    dict(what="inference 2x4096, FLOP bound 0.77", section=dict(batch_size=2, seq_len=4096),
         model="blockbert-n2-sdpa", anchor="roberta-sdpa", at_most=0.80, kind="time"),
    dict(what="inference 2x4096, FLOP bound 0.65", section=dict(batch_size=2, seq_len=4096),
         model="blockbert-n4-sdpa", anchor="roberta-sdpa", at_most=0.70, kind="time"),
    dict(what="inference 2x4096 vs Longformer (window 512)", section=dict(batch_size=2, seq_len=4096),
         model="blockbert-n2-sdpa", anchor="longformer", at_most=0.60, kind="time"),
]


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--grid", default="8x1024,16x1024,2x4096", help="comma-separated BATCHxLENGTH")
    parser.add_argument("--models", default=",".join(CANDIDATES), help="comma-separated model keys")
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--longformer_window", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds (the issue asks for at least 5)")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--too_slow_s", type=float, default=300, help="a model whose forward takes longer: not timed")
    parser.add_argument("--skip_timing", action="store_true", help="measure memory only (no timing pass)")
    add_run_arguments(parser, DEFAULT_OUTPUT_DIR)
    args = parser.parse_args(argv)
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
    return args


def build_runners(candidates, batch_size, seq_len, size, device):
    """One forward callable per model; BlockBERT and RoBERTa models share the first one's weights."""
    input_ids = random_token_ids(batch_size, seq_len, size.vocab_size, torch.Generator().manual_seed(0)).to(device)
    runners, donor = {}, None
    for candidate in candidates:
        model = build_benchmark_model(candidate, seq_len, size).to(device).eval()
        if candidate.family in ("blockbert", "roberta"):
            if donor is None:
                donor = model
            else:
                share_parameters(donor, model)
        runners[candidate.key] = lambda model=model: model(input_ids=input_ids)
    return runners


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    output_dir = prepare_run(args, DEFAULT_OUTPUT_DIR)
    if args.quick:
        size = ModelSize.tiny()
    else:
        size = ModelSize(num_layers=args.layers, longformer_window=args.longformer_window)
    sections = []
    for batch_size, seq_len in tqdm(args.grid, desc="grid", unit="point"):
        name = f"{batch_size}x{seq_len}"
        tqdm.write(f"== {name}: memory")
        rows = memory_pass(args.candidates, measure_forward,
                           dict(batch_size=batch_size, seq_len=seq_len, size=size, device=args.device),
                           args, args.too_slow_s)
        runnable = [] if args.skip_timing else [c for c in args.candidates if rows[c.key]["status"] == "ok"]
        if not args.skip_timing:
            tqdm.write(f"== {name}: timing {len(runnable)} models interleaved, {args.repeats} rounds")
        if runnable:
            runners = None
            try:
                runners = build_runners(runnable, batch_size, seq_len, size, args.device)
                with torch.inference_mode():
                    for key, timing in timing_pass(runners, args.repeats, args.warmup, args.device).items():
                        rows[key].update(timing)
            except (RuntimeError, MemoryError) as error:  # one process holds all models: say so, keep the memory pass
                for candidate in runnable:
                    rows[candidate.key]["detail"] = f"timing failed: {type(error).__name__}: {error}"[:300]
                    rows[candidate.key]["status"] = "timing failed"
            finally:
                runners = None
                gc.collect()
        sections.append(dict(name=name, batch_size=batch_size, seq_len=seq_len, rows=rows))

    notes = [
        f"{'quick mode, tiny model: ' if args.quick else 'BERT-base dims: '}{size.describe()}; "
        "`*Model` forward in inference mode, fp32, random weights and tokens, no padding.",
        f"Time: median of {args.repeats} rounds after {args.warmup} warm-up call(s), all models interleaved in one "
        "process; ratios are same-run: median over rounds of (time / anchor's time in that round), then the ratio of "
        "the medians. Only same-run ratios compare; absolute times vary between runs of a shared machine.",
        "Memory: peak allocation of one forward above the weights"
        + (", each model in a fresh process." if not args.in_process else "."),
        f"Longformer: window {size.longformer_window}, no global attention. BigBird: block sparse, block "
        f"{size.bigbird_block_size}, {size.bigbird_random_blocks} random blocks (it switches to full attention for "
        f"inputs of at most {(5 + 2 * size.bigbird_random_blocks) * size.bigbird_block_size} tokens).",
    ]
    text = results_header(
        "Inference: forward time and peak memory (paper Table 6)", "benchmarks/inference.py", argv, notes
    )
    if not args.quick and args.layers == 12:  # the targets are stated for BERT-base
        text += "## Issue targets (BlockBERT with the sdpa kernel)\n\n" + targets_table(TARGETS, sections) + "\n"
    for section in sections:
        text += f"## batch {section['batch_size']} x length {section['seq_len']}\n\n"
        text += comparison_table(args.candidates, section["rows"], "peak_bytes", "peak memory above weights (GiB)")
        text += "\n"
    write_file_atomically(output_dir / "inference.json", json.dumps(
        {"args": {k: v for k, v in vars(args).items() if k != "candidates"}, "sections": sections}, indent=2,
        default=str))
    write_file_atomically(output_dir / "inference.md", text)
    comparison_plot(
        sections, args.candidates, "peak_bytes", "Forward time and peak memory", output_dir / "inference.png"
    )
    print(text)
    print(f"wrote {output_dir}/inference.{{json,md,png}}")
    failed = [key for s in sections for key, row in s["rows"].items() if row["status"] in ("error", "timing failed")]
    if failed:
        print(f"measurements failed: {failed} (see the .md file)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
