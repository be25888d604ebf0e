"""Activation memory of a training step against the sequence length N, at a fixed number of tokens per step
(the paper's Section 2 and Table 2, with the memory definitions of its Appendix A.2).

    python benchmarks/memory_regression.py            # BERT-base dims, b x N = 4096, N = 128 ... 2048
    python benchmarks/memory_regression.py --quick    # tiny sizes, checks that the script works

For every model and N, one AdamW step of a `*ForMaskedLM` on b = 4096 / N sequences of N tokens is measured after a
warm-up step (so Adam's state exists): model memory = parameter bytes, optimizer memory = Adam state bytes, activation
memory = the step's peak allocation above those two (activations, gradients, temporaries). With b x N fixed,
activation = a2 * 4096 * N + (4096 * a1 + a0) is linear in N: a least-squares line gives the O(N^2) part (slope x N)
and the O(N) part (intercept). Blockwise attention should divide the slope by n.

Every point runs in a fresh process (see blockbert_benchmarks.isolation.run_isolated); a point that needs more than
--memory_budget_gb is recorded as out of memory and left out of the fit. Writes memory_regression.{json,md,png}.
"""

import argparse
import json
import sys
from pathlib import Path

from tqdm.auto import tqdm

from blockbert_benchmarks.arguments import add_run_arguments, prepare_run
from blockbert_benchmarks.isolation import run_measurement
from blockbert_benchmarks.measurements import measure_training_step
from blockbert_benchmarks.measuring.memory import GIB, fit_line
from blockbert_benchmarks.models import ModelSize, parse_candidates
from blockbert_benchmarks.reporting import gib, markdown_table, results_header, run_arguments
from blockbert_hf.saving import write_file_atomically


DEFAULT_OUTPUT_DIR = Path(__file__).resolve().parents[1] / "results" / "benchmarks"
DEFAULT_MODELS = ",".join(
    f"blockbert-{blocks}-{kernel}" for kernel in ("eager", "sdpa") for blocks in ("full", "n2", "n3")
)
REPORT_AT = (512, 1024)  # the paper's Table 2 columns
FLAT_SLOPE_BYTES_PER_TOKEN = 1024.0  # below 1 KiB per token of N (~0.1% of a BERT-base N^2 slope): no O(N^2) term


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=DEFAULT_MODELS, help="comma-separated model keys")
    parser.add_argument("--seq_lens", default="128,256,512,1024,2048", help="comma-separated N")
    parser.add_argument("--tokens_per_step", type=int, default=4096, help="b x N, the same for every N")
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--attention_dropout", type=float, default=0.1)
    parser.add_argument("--timeout_s", type=float, default=1800, help="a point that takes longer is 'too slow'")
    add_run_arguments(parser, DEFAULT_OUTPUT_DIR)
    args = parser.parse_args(argv)
    if args.quick:
        args.seq_lens, args.tokens_per_step = "32,64,128", 256
    try:
        args.seq_lens = [int(value) for value in args.seq_lens.split(",")]
    except ValueError:
        parser.error(f"--seq_lens must be comma-separated integers, got {args.seq_lens!r}")
    bad = [n for n in args.seq_lens if n <= 0 or args.tokens_per_step % n]
    if bad:
        parser.error(f"every N must divide --tokens_per_step={args.tokens_per_step} (b = tokens / N); not {bad}")
    if len(set(args.seq_lens)) < 2:
        parser.error("--seq_lens needs at least two different N to fit a line")
    if args.layers < 1:
        parser.error(f"--layers must be at least 1, got {args.layers}")
    try:
        args.candidates = parse_candidates(args.models)
    except ValueError as error:
        parser.error(str(error))
    return args


def reference_for(candidate, candidates):
    """The full-attention model whose slope a blockwise model's slope is compared with: transformers' RoBERTa with
    the same kernel when it was measured, else BlockBERT's full pattern with the same kernel (which is RoBERTa)."""
    keys = [c.key for c in candidates]
    for key in (f"roberta-{candidate.attn_implementation}", f"blockbert-full-{candidate.attn_implementation}"):
        if key in keys:
            return key
    return None


def fit_all(points, candidates):
    fits = {}
    for candidate in candidates:
        usable = [p for p in points if p["model"] == candidate.key and p["status"] == "ok"]
        fit = {"points_used": [p["seq_len"] for p in usable]}
        if len({p["seq_len"] for p in usable}) >= 2:
            slope, intercept = fit_line([p["seq_len"] for p in usable], [p["activation_bytes"] for p in usable])
            fit.update(slope_bytes_per_token=slope, intercept_bytes=intercept)
        fits[candidate.key] = fit
    for candidate in candidates:
        reference = reference_for(candidate, candidates)
        fit, reference_fit = fits[candidate.key], fits.get(reference, {})
        if "slope_bytes_per_token" in fit and "slope_bytes_per_token" in reference_fit:
            fit["reference"] = reference
            # A fused kernel without dropout (sdpa, flex) keeps no N x N tensor: then the reference has no O(N^2)
            # term (a flat line, up to float rounding) and there is nothing to divide by.
            if reference_fit["slope_bytes_per_token"] > FLAT_SLOPE_BYTES_PER_TOKEN:
                fit["slope_ratio"] = fit["slope_bytes_per_token"] / reference_fit["slope_bytes_per_token"]
    return fits


def markdown(args, argv, size, points, fits, method):
    by_key = {c.key: c for c in args.candidates}
    notes = [
        f"{'quick mode, tiny model: ' if args.quick else 'BERT-base dims: '}{size.describe()}; "
        f"`*ForMaskedLM`, AdamW, fp32, b x N = {args.tokens_per_step} tokens per "
        f"step, attention dropout {args.attention_dropout}, hidden dropout 0.1, random weights and tokens, 15% of "
        "positions labelled.",
        "Model memory = parameter bytes; optimizer memory = AdamW state bytes (after a warm-up step); activation "
        "memory = the measured step's peak allocation above those two (activations, gradients and temporaries; "
        "paper Appendix A.2).",
        f"Memory measured with {method}." + ("" if args.in_process else " Each point in a fresh process."),
        "RSS growth: the process's peak resident set during the step minus its resident set before it (a cross-check "
        "that also sees malloc caching and the profiler's own records).",
    ]
    text = results_header(
        "Activation memory against sequence length (paper Section 2, Table 2)",
        "benchmarks/memory_regression.py",
        argv,
        notes,
    )
    text += "## Least-squares fit: activation = slope x N + intercept\n\n"
    text += (
        "O(N^2) part at N = slope x N; O(N) part = intercept (b x N is fixed). Slope ratio: this model's slope over "
        "the full-attention model's slope with the same kernel (blockwise target: 1/n within 10%).\n\n"
    )
    rows = []
    for key, fit in fits.items():
        candidate = by_key[key]
        if "slope_bytes_per_token" not in fit:
            rows.append([candidate.label, "n/a (fewer than two points)", "", *([""] * len(REPORT_AT)), "", "", ""])
            continue
        ideal = f"{1 / candidate.num_blocks:.3f}" if candidate.num_blocks > 1 else ""
        rows.append(
            [
                candidate.label,
                f"{fit['slope_bytes_per_token'] / 2**20:.3f}",
                gib(fit["intercept_bytes"]),
                *(gib(fit["slope_bytes_per_token"] * n) for n in REPORT_AT),
                f"{fit['slope_ratio']:.3f} (vs {by_key[fit['reference']].label})"
                if "slope_ratio" in fit
                else (f"n/a ({by_key[fit['reference']].label} has no O(N^2) term)" if "reference" in fit else ""),
                ideal,
                ", ".join(map(str, fit["points_used"])),
            ]
        )
    text += markdown_table(
        [
            "model",
            "slope (MiB per token of N)",
            "O(N) part (GiB)",
            *(f"O(N^2) part at N={n} (GiB)" for n in REPORT_AT),
            "slope ratio",
            "1/n",
            "points fitted (N)",
        ],
        rows,
    )
    text += "\n## Measured points\n\n"
    rows = [
        [
            by_key[p["model"]].label,
            p["seq_len"],
            p["batch_size"],
            gib(p.get("model_bytes")),
            gib(p.get("optimizer_bytes")),
            gib(p.get("activation_bytes")),
            gib(p.get("peak_bytes")),
            gib(p.get("rss_growth_bytes")),
            p["status"] + (f": {p['detail']}" if p.get("detail") else ""),
        ]
        for p in points
    ]
    text += markdown_table(
        [
            "model",
            "N",
            "b",
            "model (GiB)",
            "optimizer (GiB)",
            "activation (GiB)",
            "peak (GiB)",
            "RSS growth (GiB)",
            "status",
        ],
        rows,
    )
    return text


def plot(args, points, fits, path):
    import matplotlib  # only the plot needs it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 5))
    for index, candidate in enumerate(args.candidates):
        color = f"C{index % 10}"
        style = "-" if candidate.attn_implementation == "eager" else "--"
        usable = [p for p in points if p["model"] == candidate.key and p["status"] == "ok"]
        axes.plot([p["seq_len"] for p in usable], [p["activation_bytes"] / GIB for p in usable], "o", color=color)
        fit = fits[candidate.key]
        if "slope_bytes_per_token" in fit:
            xs = [min(args.seq_lens), max(args.seq_lens)]
            ys = [(fit["slope_bytes_per_token"] * x + fit["intercept_bytes"]) / GIB for x in xs]
            label = f"{candidate.label}: {fit['slope_bytes_per_token'] / 2**20:.2f} MiB/token"
            axes.plot(xs, ys, style, color=color, label=label)
    axes.set_xlabel(f"sequence length N (b x N = {args.tokens_per_step} tokens per step)")
    axes.set_ylabel("activation memory (GiB)")
    axes.set_title("Training-step activation memory and least-squares fits")
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    write_file_atomically(path, lambda temporary: figure.savefig(temporary, format="png", dpi=120))
    plt.close(figure)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    output_dir = prepare_run(args, DEFAULT_OUTPUT_DIR)
    size = ModelSize.tiny() if args.quick else ModelSize(num_layers=args.layers)
    jobs = [(n, c) for n in sorted(args.seq_lens) for c in args.candidates]
    points, method = [], None
    for seq_len, candidate in tqdm(jobs, desc="memory points", unit="point"):
        result = run_measurement(
            measure_training_step,
            dict(
                candidate_key=candidate.key,
                batch_size=args.tokens_per_step // seq_len,
                seq_len=seq_len,
                size=size,
                attention_dropout=args.attention_dropout,
                device=args.device,
            ),
            isolated=not args.in_process,
            memory_budget_bytes=args.memory_budget_bytes,
            timeout_s=args.timeout_s,
            threads=args.threads,
        )
        method = method or result.get("memory_method")
        point = {"model": candidate.key, "seq_len": seq_len, "batch_size": args.tokens_per_step // seq_len, **result}
        points.append(point)
        activation = gib(point.get("activation_bytes"))
        tqdm.write(f"{candidate.label:26s} N={seq_len:5d}  {point['status']:14s} activation {activation} GiB")
        if point["status"] == "error":
            tqdm.write(point.get("traceback", point.get("detail", "")), file=sys.stderr)

    fits = fit_all(points, args.candidates)
    write_file_atomically(
        output_dir / "memory_regression.json",
        json.dumps(
            {"args": run_arguments(args), "points": points, "fits": fits},
            indent=2,
            default=str,
        ),
    )
    text = markdown(args, argv, size, points, fits, method)
    write_file_atomically(output_dir / "memory_regression.md", text)
    plot(args, points, fits, output_dir / "memory_regression.png")
    print(text)
    print(f"wrote {output_dir}/memory_regression.{{json,md,png}}")
    errors = [p for p in points if p["status"] == "error"]
    if errors:
        print(f"{len(errors)} measurement(s) failed with an error (see above and the .md file)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
