"""Where the time goes: torch.profiler's self time per aten op of one training step (default) or one forward pass
(`--forward`) for BlockBERT and RoBERTa, summed into dense layers / attention products / softmax / MLM loss / the rest,
side by side with ratios to the first model. It explains the time ratios of `train_step.py` and `inference.py`: what
blockwise attention can save is the attention part only; the dense layers and the MLM head are the same work in
every model.

    python benchmarks/profile_step.py              # training step, BERT-base, 4x1024, attention dropout 0.1
    python benchmarks/profile_step.py --forward --shape 8x1024 --models roberta-sdpa,blockbert-n2-sdpa   # inference
    python benchmarks/profile_step.py --quick      # tiny sizes, checks that the script works

Each model is profiled in a fresh process (one warm-up call, then one profiled call). Profiler overhead and a single
call make the totals rough: compare the shares and the same-row ratios. Writes profile_train_step.{json,md} or, with
--forward, profile_forward.{json,md}.
"""

import argparse
import json
import sys
from pathlib import Path

from blockbert_benchmarks.arguments import add_run_arguments, parse_grid, prepare_run
from blockbert_benchmarks.isolation import run_measurement
from blockbert_benchmarks.models import ModelSize, parse_candidates
from blockbert_benchmarks.profiling import OTHER_OPS_GROUP, STEP_PROFILE_GROUPS, profile_forward, profile_training_step
from blockbert_benchmarks.reporting import markdown_table, results_header, run_arguments
from blockbert_hf.saving import write_file_atomically


DEFAULT_OUTPUT_DIR = Path(__file__).resolve().parents[1] / "results" / "benchmarks"
DEFAULT_MODELS = "roberta-sdpa,blockbert-n2-sdpa,blockbert-full-sdpa-sparse,blockbert-n2-sdpa-sparse"
DEFAULT_FORWARD_MODELS = "roberta-sdpa,blockbert-n2-sdpa"  # the MLM-head variants differ only in training
TOP_OPS = 12


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--models",
        help=f"comma-separated model keys; ratios to the first (default {DEFAULT_MODELS}, with --forward "
        f"{DEFAULT_FORWARD_MODELS})",
    )
    parser.add_argument("--shape", default="4x1024", help="BATCHxLENGTH of the step")
    parser.add_argument("--forward", action="store_true", help="profile a *Model forward (inference) instead")
    parser.add_argument("--attention_dropout", type=float, default=0.1, help="training step only")
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--timeout_s", type=float, default=1800, help="a model whose profile takes longer: skipped")
    add_run_arguments(parser, DEFAULT_OUTPUT_DIR)
    args = parser.parse_args(argv)
    try:
        args.candidates = parse_candidates(args.models or (DEFAULT_FORWARD_MODELS if args.forward else DEFAULT_MODELS))
        shapes = parse_grid(args.shape)
    except ValueError as error:
        parser.error(str(error))
    if len(shapes) != 1:
        parser.error(f"--shape takes one BATCHxLENGTH, got {args.shape!r}.")
    args.batch_size, args.seq_len = shapes[0]
    if not 0 <= args.attention_dropout < 1:
        parser.error(f"--attention_dropout must be in [0, 1), got {args.attention_dropout}.")
    return args


def ratio(value, anchor):
    return f"{value / anchor:.3f}" if anchor else ""


def profile_table(candidates, results) -> str:
    """Groups, then the ops with the most time in any model: seconds per model and the ratio to the first model."""
    measured = [c for c in candidates if results[c.key]["status"] == "ok"]
    if not measured:
        return "No model could be profiled.\n"
    first = measured[0].key
    headers = ["what", *(f"{c.key} (s)" for c in measured), *(f"{c.key} / {first}" for c in measured[1:])]
    rows = []
    for name, values in [
        *(
            (group, [results[c.key]["groups"][group] for c in measured])
            for group in [*STEP_PROFILE_GROUPS, OTHER_OPS_GROUP]
        ),
        ("total (profiled self time)", [results[c.key]["profiled_s"] for c in measured]),
        ("wall time under the profiler", [results[c.key]["step_s"] for c in measured]),
    ]:
        rows.append([name, *(f"{v:.2f}" for v in values), *(ratio(v, values[0]) for v in values[1:])])
    busiest = sorted(
        {op for c in measured for op in results[c.key]["ops"]},
        key=lambda op: -max(results[c.key]["ops"].get(op, 0.0) for c in measured),
    )[:TOP_OPS]
    for op in busiest:
        values = [results[c.key]["ops"].get(op, 0.0) for c in measured]
        rows.append([f"`{op}`", *(f"{v:.2f}" for v in values), *(ratio(v, values[0]) for v in values[1:])])
    return markdown_table(headers, rows)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    output_dir = prepare_run(args, DEFAULT_OUTPUT_DIR)
    size = ModelSize.tiny() if args.quick else ModelSize(num_layers=args.layers)
    if args.quick:
        args.batch_size, args.seq_len = 2, 64
    results = {}
    for candidate in args.candidates:
        print(f"profiling {candidate.label} ...", flush=True)
        kwargs = dict(
            candidate_key=candidate.key, batch_size=args.batch_size, seq_len=args.seq_len, size=size, device=args.device
        )
        if not args.forward:
            kwargs["attention_dropout"] = args.attention_dropout
        results[candidate.key] = run_measurement(
            profile_forward if args.forward else profile_training_step,
            kwargs,
            isolated=not args.in_process,
            memory_budget_bytes=args.memory_budget_bytes,
            timeout_s=args.timeout_s,
            threads=args.threads,
        )
        if results[candidate.key]["status"] != "ok":
            print(f"  {results[candidate.key]['status']}: {results[candidate.key].get('detail', '')}", flush=True)
    what = (
        "One `*Model` forward in inference mode"
        if args.forward
        else (f"One AdamW step of `*ForMaskedLM` (attention dropout {args.attention_dropout})")
    )
    notes = [
        f"{what}, {size.describe()}, batch {args.batch_size} x {args.seq_len} tokens, {args.threads} threads, "
        f"device {args.device}.",
        "Self time per aten op from torch.profiler, one profiled call after a warm-up call, each model in a fresh "
        "process; the profiler adds overhead, so read shares and same-row ratios rather than totals.",
    ]
    notes.append("Models: " + "; ".join(f"`{c.key}` = {c.label}" for c in args.candidates) + ".")
    stem = "profile_forward" if args.forward else "profile_train_step"
    title = "Where the time of a forward pass goes" if args.forward else "Where the time of a training step goes"
    header = results_header(title, "benchmarks/profile_step.py", argv, notes)
    markdown = header + profile_table(args.candidates, results)
    record = dict(args=run_arguments(args), results=results)
    write_file_atomically(output_dir / f"{stem}.json", json.dumps(record, indent=2, default=str))
    write_file_atomically(output_dir / f"{stem}.md", markdown)
    print(markdown)
    print(f"wrote {output_dir / stem}.md and .json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
