"""Forward time on a batch of mixed lengths: BlockBERT's padded computation, its padding-free one, length-sorted
micro-batches (what a user can do without the option), and transformers' RoBERTa on the same batch.

    python benchmarks/mixed_lengths.py                        # BERT-base dims, n = 2, sdpa, 16 x U(64, 1024) tokens
    python benchmarks/mixed_lengths.py --quick                # tiny sizes, checks the script runs

The batch: `--batch_size` lengths drawn uniformly from [`--min_length`, `--max_length`] (seeded), right-padded to the
longest. A second section times a full batch of one length (no padding), where the padding-free option has nothing to
remove and must cost nothing. All candidates of a section are timed interleaved in one process (medians of --repeats
rounds); only same-run ratios are reported. Weights are random and shared: every BlockBERT candidate is one model.
"""

import argparse
import json
import sys
from pathlib import Path

import torch
from transformers import RobertaConfig, RobertaModel

from blockbert_benchmarks.measuring.machine import machine_description
from blockbert_benchmarks.measuring.timing import interleaved_medians
from blockbert_benchmarks.models import bert_base_config
from blockbert_benchmarks.reporting import measuring_arguments, print_and_write
from blockbert_hf import BlockBertModel


ANCHOR = "RoBERTa (sdpa), padded"


def mixed_batch(batch_size: int, min_length: int, max_length: int, seed: int, vocab_size: int = 30522):
    """`batch_size` right-padded sequences of lengths drawn uniformly from [min_length, max_length]: input ids (real
    tokens never the padding id 1), attention mask, and the lengths."""
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(min_length, max_length + 1, (batch_size,), generator=generator).tolist()
    longest = max(lengths)
    input_ids = torch.randint(3, vocab_size, (batch_size, longest), generator=generator)
    attention_mask = (torch.arange(longest)[None, :] < torch.tensor(lengths)[:, None]).long()
    return input_ids.masked_fill(attention_mask == 0, 1), attention_mask, lengths


def length_sorted_micro_batches(input_ids, attention_mask, lengths, micro_batch_size: int):
    """The batch as a user can run it today: sorted by length, cut into micro-batches, each padded to its longest."""
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    batches = []
    for start in range(0, len(order), micro_batch_size):
        rows = torch.tensor(order[start : start + micro_batch_size])
        longest = max(lengths[i] for i in rows.tolist())
        batches.append((input_ids[rows, :longest], attention_mask[rows, :longest]))
    return batches


def build_models(seq_len: int, layers: int, num_blocks: int):
    """BlockBERT (sdpa) and RoBERTa (sdpa) at BERT-base dims with random weights, in eval mode."""
    blockbert = BlockBertModel(
        bert_base_config(seq_len, num_hidden_layers=layers, num_blocks=num_blocks), add_pooling_layer=False
    )
    roberta_config = RobertaConfig(
        vocab_size=30522,
        hidden_size=768,
        num_hidden_layers=layers,
        num_attention_heads=12,
        intermediate_size=3072,
        max_position_embeddings=seq_len + 2,
        type_vocab_size=1,
        layer_norm_eps=1e-5,
    )
    roberta = RobertaModel(roberta_config, add_pooling_layer=False)
    for model in (blockbert, roberta):
        model.set_attn_implementation("sdpa")
        model.eval()
    return blockbert, roberta


def run_with(model, padding_free: bool, batches):
    """Runs `model` on each `(input_ids, attention_mask)` of `batches` with the padding-free option set."""
    model.config.padding_free = padding_free
    for input_ids, attention_mask in batches:
        model(input_ids, attention_mask=attention_mask)


def mixed_lengths_section(args, blockbert, roberta) -> dict:
    input_ids, attention_mask, lengths = mixed_batch(args.batch_size, args.min_length, args.max_length, args.seed)
    whole = [(input_ids, attention_mask)]
    sorted_batches = length_sorted_micro_batches(input_ids, attention_mask, lengths, args.micro_batch_size)
    micro = f"length-sorted micro-batches of {args.micro_batch_size}"
    candidates = {
        ANCHOR: lambda: roberta(input_ids, attention_mask=attention_mask),
        f"RoBERTa (sdpa), {micro}": lambda: [roberta(i, attention_mask=m) for i, m in sorted_batches],
        f"BlockBERT n={args.num_blocks} (sdpa), padded": lambda: run_with(blockbert, False, whole),
        f"BlockBERT n={args.num_blocks} (sdpa), {micro}": lambda: run_with(blockbert, False, sorted_batches),
        f"BlockBERT n={args.num_blocks} (sdpa), padding-free": lambda: run_with(blockbert, True, whole),
    }
    with torch.inference_mode():
        timings = interleaved_medians(candidates, repeats=args.repeats, anchor=ANCHOR)
    padded_tokens = len(lengths) * max(lengths)
    return {
        "lengths": lengths,
        "real_tokens": sum(lengths),
        "padded_tokens": padded_tokens,
        "padding_share": 1 - sum(lengths) / padded_tokens,
        "timings": timings,
    }


def full_batch_section(args, blockbert, roberta) -> dict:
    input_ids = torch.randint(3, 30522, (args.full_batch_size, args.full_length))
    attention_mask = torch.ones_like(input_ids)
    batch = [(input_ids, attention_mask)]
    candidates = {
        ANCHOR: lambda: roberta(input_ids, attention_mask=attention_mask),
        f"BlockBERT n={args.num_blocks} (sdpa), padded": lambda: run_with(blockbert, False, batch),
        f"BlockBERT n={args.num_blocks} (sdpa), padding-free": lambda: run_with(blockbert, True, batch),
    }
    with torch.inference_mode():
        return {"timings": interleaved_medians(candidates, repeats=args.repeats, anchor=ANCHOR)}


def ratio_to(timings: dict, name: str, other: str) -> float:
    """Median over rounds of `other`'s time over `name`'s in the same round: how many times faster `name` is."""
    rounds = zip(timings[name]["times_s"], timings[other]["times_s"])
    return float(torch.tensor([slow / fast for fast, slow in rounds]).median())


def timing_table(timings: dict) -> list[str]:
    lines = [
        "| candidate | median (s) | ratio of medians to RoBERTa | median of paired per-round ratios |",
        "|---|---|---|---|",
    ]
    for name, result in timings.items():
        lines.append(
            f"| {name} | {result['median_s']:.3f} | {result['ratio_of_medians']:.3f} | "
            f"{result['median_paired_ratio']:.3f} |"
        )
    return lines


def render_markdown(results: dict) -> str:
    args, mixed, full = results["args"], results["mixed_lengths"], results["full_batch"]
    n = args["num_blocks"]
    padded, packed = f"BlockBERT n={n} (sdpa), padded", f"BlockBERT n={n} (sdpa), padding-free"
    command = " ".join(["python benchmarks/mixed_lengths.py", *results["argv"]])
    lines = [
        "# Batches of mixed lengths (measured by `benchmarks/mixed_lengths.py`)",
        "",
        f"Machine: {results['machine']}, {results['threads']} threads. Command: `{command}` (repeats "
        f"{args['repeats']}, candidates interleaved in one process, random weights, {args['layers']} layers of "
        "BERT-base dims).",
        "",
        f"## {args['batch_size']} sequences of {args['min_length']} to {args['max_length']} tokens (seed "
        f"{args['seed']}): {mixed['real_tokens']:,} real tokens padded to {mixed['padded_tokens']:,} "
        f"({mixed['padding_share']:.0%} padding)",
        "",
        *timing_table(mixed["timings"]),
        "",
        f"Padding-free is {ratio_to(mixed['timings'], packed, padded):.2f}x faster than the padded computation "
        "(median of paired per-round ratios); the token count bounds it near "
        f"{mixed['padded_tokens'] / mixed['real_tokens']:.2f}x.",
        "",
        f"## A full batch of one length: {args['full_batch_size']} x {args['full_length']} tokens, no padding",
        "",
        *timing_table(full["timings"]),
        "",
        f"Padded over padding-free time, median of paired per-round ratios: "
        f"{ratio_to(full['timings'], packed, padded):.3f}. Without padding both run the same computation (there is "
        "nothing to remove), so its distance from 1 is this run's noise.",
    ]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--min_length", type=int, default=64)
    parser.add_argument("--max_length", type=int, default=1024)
    parser.add_argument("--micro_batch_size", type=int, default=4)
    parser.add_argument("--full_batch_size", type=int, default=8)
    parser.add_argument("--full_length", type=int, default=512)
    parser.add_argument("--num_blocks", type=int, default=2)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks that the script works")
    parser.add_argument("--output", help="write the measurements as JSON here")
    parser.add_argument(
        "--markdown", help="write the tables as markdown here (e.g. results/benchmarks/mixed_lengths.md)"
    )
    parser.add_argument("--from_json", help="print/render a run saved with --output instead of measuring")
    args = parser.parse_args(argv)
    if args.quick:
        args.batch_size, args.min_length, args.max_length, args.micro_batch_size = 4, 8, 64, 2
        args.full_batch_size, args.full_length, args.layers, args.repeats = 2, 32, 1, 2
    if not 1 <= args.min_length <= args.max_length:
        parser.error(f"need 1 <= --min_length <= --max_length, got {args.min_length} and {args.max_length}.")
    if min(args.batch_size, args.micro_batch_size, args.full_batch_size, args.layers, args.repeats) < 1:
        parser.error("--batch_size, --micro_batch_size, --full_batch_size, --layers and --repeats must be >= 1.")

    if args.from_json:
        results = json.loads(Path(args.from_json).read_text())
    else:
        blockbert, roberta = build_models(max(args.max_length, args.full_length), args.layers, args.num_blocks)
        results = {
            "machine": machine_description(),
            "threads": torch.get_num_threads(),
            "argv": measuring_arguments(sys.argv[1:] if argv is None else argv),
            "args": {k: v for k, v in vars(args).items() if k not in ("output", "markdown", "from_json")},
            "mixed_lengths": mixed_lengths_section(args, blockbert, roberta),
            "full_batch": full_batch_section(args, blockbert, roberta),
        }
    print_and_write(results, render_markdown(results), args.output, args.markdown)


if __name__ == "__main__":
    main()
