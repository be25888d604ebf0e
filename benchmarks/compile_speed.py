"""Forward time of BlockBERT n=2 (heads 10:2, sdpa kernel, BERT-base dims) eager vs
`torch.compile(model, fullgraph=True, dynamic=True)`, per batch x length.

    python benchmarks/compile_speed.py                        # 8 x 1024 and 2 x 4096, 12 layers
    python benchmarks/compile_speed.py --quick                # tiny sizes, checks the script runs

For every shape the model is built once and compiled from a cold start (torch's compile caches reset and Inductor's
on-disk caches off; --quick keeps the on-disk caches, so that reruns reuse compiled kernels): the first compiled call,
which compiles, is timed as a user first meets it. Eager and compiled forwards then run interleaved in one process
(--repeats rounds, inference mode, seeded random ids); a recompile during the rounds is an error. Only same-run ratios
compiled / eager are reported.
"""

import argparse
import datetime
import json
import sys
import time
import warnings
from pathlib import Path

import torch

from blockbert_benchmarks.arguments import parse_grid
from blockbert_benchmarks.measuring.machine import machine_description, recorded_command
from blockbert_benchmarks.measuring.timing import interleaved_medians
from blockbert_benchmarks.models import bert_base_config
from blockbert_benchmarks.reporting import markdown_table, print_and_write
from blockbert_benchmarks.workloads import random_token_ids
from blockbert_hf import BlockBertConfig, BlockBertModel


EAGER, COMPILED = "eager (sdpa)", "compiled (sdpa)"
HEADS_PER_SHIFT = [10, 2]
RECORDED_ARGUMENTS = ("repeats", "layers", "seed", "threads", "quick", "cold_compile")
# --quick: the heads of BERT-base (the 10:2 split needs 12) at a tiny width and depth.
TINY_DIMS = dict(hidden_size=96, intermediate_size=192, vocab_size=1000)


def model_config(seq_len: int, layers: int, quick: bool) -> BlockBertConfig:
    dims = TINY_DIMS if quick else {}
    return bert_base_config(seq_len, num_hidden_layers=layers, num_blocks=2, heads_per_shift=HEADS_PER_SHIFT, **dims)


def compile_and_time(config: BlockBertConfig, batch_size: int, repeats: int, seed: int, cold: bool = True) -> dict:
    """One shape: the first compiled call (compile + forward), then eager and compiled forwards interleaved. `cold`:
    the compile may not read Inductor's on-disk caches (what a first compile on a machine costs)."""
    torch.manual_seed(seed)
    model = BlockBertModel(config, add_pooling_layer=False).eval()
    model.set_attn_implementation("sdpa")
    input_ids = random_token_ids(
        batch_size, config.max_sequence_length, config.vocab_size, torch.Generator().manual_seed(seed)
    )
    torch._dynamo.reset()  # a cold compile: nothing kept from an earlier shape
    compiled = torch.compile(model, fullgraph=True, dynamic=True)
    with torch.inference_mode():
        with torch._inductor.config.patch(force_disable_caches=cold), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="dynamo_pgo force disabled")  # says what `cold` asked for
            start = time.perf_counter()
            compiled_output = compiled(input_ids).last_hidden_state
            first_call_s = time.perf_counter() - start
        eager_output = model(input_ids).last_hidden_state  # the eager warm-up, and the reference
        max_abs_difference = (compiled_output - eager_output).abs().max().item()
        del compiled_output, eager_output
        with torch._dynamo.config.patch(error_on_recompile=True):
            timings = interleaved_medians(
                {EAGER: lambda: model(input_ids), COMPILED: lambda: compiled(input_ids)},
                repeats=repeats,
                warmup=0,
                anchor=EAGER,
            )
    return {
        "batch_size": batch_size,
        "seq_len": config.max_sequence_length,
        "first_compiled_call_s": first_call_s,
        # The first call also runs one forward; the steady compiled forward is the best estimate of that part.
        "compile_s": first_call_s - timings[COMPILED]["median_s"],
        "max_abs_difference": max_abs_difference,
        "forward": timings,
    }


def render_markdown(results: dict) -> str:
    args = results["args"]
    dims = "tiny dims (--quick)" if args["quick"] else "BERT-base dims"
    caches = "Inductor's on-disk caches off" if args["cold_compile"] else "Inductor's on-disk caches kept (--quick)"
    lines = [
        "# BlockBERT forward speed, eager vs torch.compile (measured by `benchmarks/compile_speed.py`)",
        "",
        f"Produced by `{results['command']}` on {results['measured_at']}.",
        "",
        f"Machine: {results['machine']}.",
        "",
        f"- Model: `BlockBertModel` n=2 (heads 10:2), sdpa kernel, {args['layers']} layers, {dims}, N = the "
        "sequence length; inputs: seeded random ids, no attention mask, inference mode.",
        "- Compiled: `torch.compile(model, fullgraph=True, dynamic=True)` with the default (Inductor) backend, "
        f"compiled once per shape after `torch._dynamo.reset()`, {caches}.",
        f"- Timing: eager and compiled forwards interleaved in {args['repeats']} rounds in one process, after one "
        "warm-up call each; compile time = first compiled call - median compiled forward (the first shape's also "
        "includes torch's one-time compiler start-up in the process).",
        "",
    ]
    rows = []
    for shape, result in results["shapes"].items():
        eager, compiled = result["forward"][EAGER], result["forward"][COMPILED]
        rows.append(
            [
                shape,
                f"{eager['median_s']:.3f}",
                f"{compiled['median_s']:.3f}",
                f"{compiled['ratio_of_medians']:.3f}",
                f"{compiled['median_paired_ratio']:.3f}",
                f"{result['compile_s']:.1f}",
                f"{result['max_abs_difference']:.1e}",
            ]
        )
    lines.append(
        markdown_table(
            [
                "batch x length",
                "eager median (s)",
                "compiled median (s)",
                "compiled / eager (of medians)",
                "compiled / eager (median of paired rounds)",
                "compile time (s)",
                "max abs difference",
            ],
            rows,
        )
    )
    return "\n".join(lines)


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--grid", default="8x1024,2x4096", help="comma-separated BATCHxLENGTH")
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds")
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0, help="seeds the weights and the input ids")
    parser.add_argument("--threads", type=int, help="torch threads (default 2, the machine's cores; 1 with --quick)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks that the script works")
    parser.add_argument("--output", help="write the measurements as JSON here")
    parser.add_argument(
        "--markdown", help="write the table as markdown here (e.g. results/benchmarks/compile_speed.md)"
    )
    parser.add_argument("--from_json", help="print/render a run saved with --output instead of measuring")
    args = parser.parse_args(argv)
    if args.quick:
        args.grid, args.repeats, args.layers = "2x64", 2, 1
    args.cold_compile = not args.quick
    if args.threads is None:
        args.threads = 1 if args.quick else 2
    if args.repeats < 1 or args.layers < 1 or args.threads < 1:
        parser.error("--repeats, --layers and --threads must be at least 1")
    try:
        args.grid = parse_grid(args.grid)
        for _, seq_len in args.grid:  # a bad shape fails now, not after the shapes before it were measured
            model_config(seq_len, args.layers, args.quick).check_blockwise_fields()
    except ValueError as error:
        parser.error(str(error))
    return args


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.from_json:
        results = json.loads(Path(args.from_json).read_text())
    else:
        torch.set_num_threads(args.threads)  # before compiling: Inductor's CPU kernels take the count when generated
        results = {
            "machine": machine_description(),
            "command": recorded_command(["python", "benchmarks/compile_speed.py", *argv]),
            "measured_at": f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
            "args": {
                "grid": [f"{b}x{n}" for b, n in args.grid],
                **{key: getattr(args, key) for key in RECORDED_ARGUMENTS},
            },
            "shapes": {
                f"{batch_size}x{seq_len}": compile_and_time(
                    model_config(seq_len, args.layers, args.quick),
                    batch_size,
                    args.repeats,
                    args.seed,
                    cold=args.cold_compile,
                )
                for batch_size, seq_len in args.grid
            },
        }
    print_and_write(results, render_markdown(results), args.output, args.markdown)


if __name__ == "__main__":
    main()
