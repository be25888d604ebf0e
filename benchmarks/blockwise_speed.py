"""Forward time of BlockBertModel (BERT-base dims) with full attention vs blockwise n=2/n=3, and the attention op alone.

    python benchmarks/blockwise_speed.py                      # 8 x 1024 model forward + attention op at N = 4096
    python benchmarks/blockwise_speed.py --quick              # tiny sizes, checks the script runs

All candidates are timed interleaved in one process (medians of --repeats runs); only same-run ratios are reported.
"""

import argparse
import json
from pathlib import Path

import torch

from blockbert_benchmarks.measuring.machine import machine_description
from blockbert_benchmarks.measuring.timing import interleaved_medians
from blockbert_benchmarks.models import bert_base_config
from blockbert_benchmarks.reporting import print_and_write
from blockbert_hf import BlockBertModel
from blockbert_hf.model.modeling_blockbert import build_attention_layout, kernel_attention_on_blocks


def model_forward(batch_size: int, seq_len: int, repeats: int, layers: int) -> dict:
    input_ids = torch.randint(3, 30522, (batch_size, seq_len))
    candidates = {}
    for name, fields in {
        "full (sdpa)": dict(attention_pattern="full", num_blocks=1),
        "blockwise n=2 (sdpa)": dict(num_blocks=2),
        "blockwise n=3 (sdpa)": dict(num_blocks=3),
    }.items():
        config = bert_base_config(seq_len, num_hidden_layers=layers, **fields)
        model = BlockBertModel(config, add_pooling_layer=False).eval()
        model.set_attn_implementation("sdpa")
        candidates[name] = lambda model=model: model(input_ids)
    with torch.inference_mode():
        return interleaved_medians(candidates, repeats=repeats, anchor="full (sdpa)")


OP_HEADS, OP_HEAD_DIM = 12, 64


def blockwise_attention(query, key, value, layout) -> torch.Tensor:
    """BlockBERT's attention op as its self-attention layer runs it with the sdpa kernel: `(batch, L, heads,
    head_dim)` inputs folded into blocks (a view), one kernel call per head group, the groups' outputs joined into
    `(batch, L, heads * head_dim)`."""
    batch_size, seq_len, heads, head_dim = query.shape
    blocks_shape = (batch_size * layout.blocks_per_sequence, layout.block_len, heads, head_dim)
    module = torch.nn.Module()
    module.is_causal = False  # transformers' SDPA wrapper reads this; a bare module would get causal attention
    blocks = (x.view(blocks_shape) for x in (query, key, value))
    outputs = kernel_attention_on_blocks(module, *blocks, layout, "sdpa", scaling=head_dim**-0.5)
    return torch.cat(outputs, dim=2).reshape(batch_size, seq_len, heads * head_dim)


def attention_op_candidates(query, key, value) -> dict:
    """The attention op alone on `(1, L, heads, head_dim)` inputs: full SDPA, and blockwise n=2 and n=4."""
    seq_len = query.shape[1]
    # The anchor gets the strided (batch, heads, L, d) views RoBERTa's attention passes to SDPA; the same inputs made
    # contiguous are timed too, to show how much of any difference is memory layout.
    full_inputs = [x.transpose(1, 2) for x in (query, key, value)]
    contiguous_inputs = [x.contiguous() for x in full_inputs]
    candidates = {
        "full SDPA": lambda: torch.nn.functional.scaled_dot_product_attention(*full_inputs),
        "full SDPA, contiguous": lambda: torch.nn.functional.scaled_dot_product_attention(*contiguous_inputs),
    }
    for n in (2, 4):
        config = bert_base_config(seq_len, num_blocks=n)
        layout = build_attention_layout(config, None, 1, seq_len, "cpu")
        candidates[f"blockwise n={n}"] = lambda layout=layout: blockwise_attention(query, key, value, layout)
    return candidates


def attention_op(seq_len: int, repeats: int) -> dict:
    query, key, value = (torch.randn(1, seq_len, OP_HEADS, OP_HEAD_DIM) for _ in range(3))
    with torch.inference_mode():
        return interleaved_medians(attention_op_candidates(query, key, value), repeats=repeats, anchor="full SDPA")


def render_markdown(results: dict) -> str:
    args = results["args"]
    lines = [
        "# BlockBERT forward speed (measured by `benchmarks/blockwise_speed.py`)",
        "",
        f"Machine: {results['machine']}. Command: `python benchmarks/blockwise_speed.py` "
        f"(repeats {args['repeats']}, interleaved in one process).",
        "",
        f"## `BlockBertModel` forward, batch {args['batch_size']} x {args['seq_len']}, {args['layers']} layers, "
        "BERT-base dims",
        "",
        "| model | median (s) | ratio of medians to full-sdpa | median of paired per-round ratios |",
        "|---|---|---|---|",
    ]
    for name, result in results["forward"].items():
        lines.append(
            f"| {name} | {result['median_s']:.3f} | {result['ratio_of_medians']:.3f} | "
            f"{result['median_paired_ratio']:.3f} |"
        )
    lines += [
        "",
        f"## Attention op alone, 1 x {args['op_seq_len']}, 12 heads x 64 (q, k, v given; no projections)",
        "",
        "| op | median (ms) | time x n / full-SDPA (of medians) | time x n / full-SDPA (paired rounds) |",
        "|---|---|---|---|",
    ]
    for name, result in results["attention_op"].items():
        n = int(name.split("=")[1]) if "=" in name else 1
        lines.append(
            f"| {name} | {result['median_s'] * 1000:.1f} | {result['ratio_of_medians'] * n:.3f} | "
            f"{result['median_paired_ratio'] * n:.3f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--seq_len", type=int, default=1024)
    parser.add_argument("--op_seq_len", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks that the script works")
    parser.add_argument("--output", help="write the measurements as JSON here")
    parser.add_argument(
        "--markdown", help="write the tables as markdown here (e.g. results/benchmarks/blockwise_speed.md)"
    )
    parser.add_argument("--from_json", help="print/render a run saved with --output instead of measuring")
    args = parser.parse_args(argv)
    if args.quick:
        args.batch_size, args.seq_len, args.op_seq_len, args.repeats, args.layers = 1, 128, 256, 2, 1
    if args.op_seq_len <= 0 or args.op_seq_len % 4:
        parser.error(f"--op_seq_len must be a positive multiple of 4 (whole blocks at n = 2, 4), got {args.op_seq_len}")

    if args.from_json:
        results = json.loads(Path(args.from_json).read_text())
    else:
        results = {
            "machine": machine_description(),
            "args": {k: v for k, v in vars(args).items() if k not in ("output", "markdown", "from_json")},
            "forward": model_forward(args.batch_size, args.seq_len, args.repeats, args.layers),
            "attention_op": attention_op(args.op_seq_len, args.repeats),
        }
    print_and_write(results, render_markdown(results), args.output, args.markdown)


if __name__ == "__main__":
    main()
