"""The paper's efficiency tables on a GPU, side by side in one run short enough for a machine lent for minutes:
BlockBERT n = 2 and 3 (sdpa) against RoBERTa with eager attention (the paper's baseline) and with sdpa (PyTorch's flash
kernel, what users run today), and, from N = 1024 on, BlockBERT n = 2 on flex_attention, Longformer and BigBird.

    python benchmarks/gpu_efficiency.py --output_dir results/benchmarks       # CUDA, BERT-base: about 6 minutes (H200)
    python benchmarks/gpu_efficiency.py --tiny                             # tiny sizes on the CPU, in seconds
    python benchmarks/gpu_efficiency.py --render results/benchmarks/gpu_efficiency.json  # the .md again, from the .json

Parts (--parts), each within its time budget (--budgets; default in seconds: train 180, inference 100, max_batch 60,
long_document 40, planned for one H200):
1. train: one AdamW step of `*ForMaskedLM` under bf16 autocast, attention dropout 0.1 (flex_attention: 0, it has
   none), at 16 x 512, 8 x 1024 and 2 x 4096 tokens: peak memory (weights + AdamW state + the step's peak, measured
   after a warm-up step) and step time (models interleaved, medians of up to 10 rounds: `train_step.py`'s measures).
2. inference: `*Model` forward, weights in bf16, at 32 x 512, 16 x 1024 and 4 x 4096: sequences/s and peak memory
   above the weights (`inference.py`'s measures).
3. max_batch: the largest batch of N = 1024 whose training step fits in GPU memory, each model searched from what its
   part-1 memory predicts, a probe being one full step that completes or runs out of memory.
4. long_document: seconds per question over whole articles (`long_document_cost.py --sets article`, bf16): sliding
   windows of 512 tokens against BlockBERT reading 1,024 (n = 2) and 2,048 (n = 4) at once. Needs
   --long_document_data (a folder with article.json, from experiments/build_long_context_qa.py) and
   --long_document_source (the source model's folder; config and tokenizer suffice, the weights are random).

Every ratio is taken in the same run against both RoBERTa rows: time as the median over rounds of the per-round
ratio, memory as the ratio of peaks. A part starts no measurement once its budget is spent (what it did not start is
recorded as cut), and the .json and .md are rewritten after every measurement: a run killed at any point (SIGINT
ends it cleanly) leaves what it measured. Each part records the machine (GPU, torch, transformers) it ran on.
"""

import argparse
import contextlib
import datetime
import functools
import json
import os
import platform
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import long_document_cost
import torch
import transformers
from inference import build_runners as inference_runners
from train_step import build_runners as training_runners

from blockbert_benchmarks.anchors import timing_pass
from blockbert_benchmarks.isolation import run_measurement
from blockbert_benchmarks.largest_batch import TrainingStepProbe, release_memory, search_largest_batch
from blockbert_benchmarks.measurements import measure_forward, measure_training_step
from blockbert_benchmarks.measuring.machine import machine_description, recorded_command
from blockbert_benchmarks.measuring.memory import GIB
from blockbert_benchmarks.measuring.timing import median_paired_ratio, synchronized
from blockbert_benchmarks.models import CANDIDATES, ModelSize, other_families_note
from blockbert_benchmarks.reporting import markdown_table
from blockbert_hf import attention_blockbert
from blockbert_hf.saving import write_file_atomically


DEFAULT_OUTPUT_DIR = Path(__file__).resolve().parents[1] / "results" / "benchmarks"
STEM = "gpu_efficiency"
PARTS = ("train", "inference", "max_batch", "long_document")
# Seconds each part may take: its planned time on one H200 with some room (the run is cut to fit a 10-minute command).
BUDGETS_S = {"train": 180.0, "inference": 100.0, "max_batch": 60.0, "long_document": 40.0}
ANCHORS = ("roberta-eager", "roberta-sdpa")
CORE_MODELS = ("blockbert-n2-sdpa", "blockbert-n3-sdpa", "roberta-eager", "roberta-sdpa")
# At N >= 1024 (nominal) only; flex_attention last, so that its compiles (minutes in all) can only cut its own rows.
LONG_MODELS = ("longformer", "bigbird", "blockbert-n2-flex_attention")
SUMMARY_MODELS = ("blockbert-n2-sdpa", "blockbert-n3-sdpa", "blockbert-n2-flex_attention")
ATTENTION_DROPOUT = 0.1  # the paper's
PRECISION = "bfloat16"
# Models whose training step runs in fp32 (no autocast), and why.
FP32_TRAINING = {
    "bigbird": "fp32: transformers' BigBird block-sparse attention fails under bf16 autocast (it scatters fp32 "
    "probabilities into a bf16 matrix)"
}
# The paper's ratios to its RoBERTa (fairseq, attention as RoBERTa-eager here): (part, N, model, measure) -> figure.
# The same figures are train_step.py's and inference.py's targets.
PAPER_RATIOS = {
    ("train", 1024, "blockbert-n2-sdpa", "memory"): (0.73, "Table 3"),
    ("train", 1024, "blockbert-n3-sdpa", "memory"): (0.64, "Table 3"),
    ("inference", 1024, "blockbert-n2-sdpa", "time"): (0.72, "Table 6"),
}


@dataclass(frozen=True)
class Scale:
    """The sizes of a run. Grid points are (batch size, N, nominal N): the BERT-base N a tiny run's N stands for, by
    which the paper's figures and the N = 1024 parts find their grid point."""

    name: str
    size: ModelSize
    train_grid: tuple[tuple[int, int, int], ...]
    inference_grid: tuple[tuple[int, int, int], ...]
    max_batch_limit: int
    repeats: int
    long_document_questions: int


FULL = Scale(
    "BERT-base",
    ModelSize(),
    train_grid=((16, 512, 512), (8, 1024, 1024), (2, 4096, 4096)),
    inference_grid=((32, 512, 512), (16, 1024, 1024), (4, 4096, 4096)),
    max_batch_limit=4096,
    repeats=10,
    long_document_questions=40,
)
TINY = Scale(
    "tiny",
    ModelSize.tiny(),
    train_grid=((2, 32, 512), (2, 64, 1024), (1, 256, 4096)),
    inference_grid=((2, 32, 512), (2, 64, 1024), (1, 256, 4096)),
    max_batch_limit=16,
    repeats=3,
    long_document_questions=2,
)


class Budget:
    """A part's time box: `left()` seconds remain; `cut_row()` records a measurement not started for lack of time."""

    def __init__(self, seconds: float, clock=time.monotonic):
        self.seconds, self.clock, self.started = seconds, clock, clock()
        self.cut = False

    def used(self) -> float:
        return self.clock() - self.started

    def left(self) -> float:
        return self.seconds - self.used()

    def cut_row(self) -> dict:
        self.cut = True
        return {"status": "cut", "detail": f"not started: the part's {self.seconds:g} s budget was spent"}


def least_left(*budgets: Budget) -> float:
    return min(budget.left() for budget in budgets)


@dataclass
class Job:
    """What a part needs: the sizes, the device, its budget, and `save` (rewrites the results files)."""

    scale: Scale
    device: str
    budget: Budget
    save: Callable[[], None]
    options: argparse.Namespace | None
    results: dict


def models_at(nominal_seq_len: int) -> list[str]:
    return list(CORE_MODELS) + (list(LONG_MODELS) if nominal_seq_len >= 1024 else [])


def not_run_here(key: str, device: str) -> str | None:
    """Why `key` is not measured on `device`, or None."""
    if CANDIDATES[key].attn_implementation == "flex_attention" and torch.device(device).type != "cuda":
        return "flex_attention is measured on CUDA only (on the CPU it compiles for minutes and has no backward)"
    return None


def measure_row(function, kwargs: dict, key: str, job: Job) -> dict:
    """One memory measurement in this process (CUDA's allocator statistics make a fresh process unnecessary)."""
    reason = not_run_here(key, job.device)
    if reason:
        return {"status": "not run", "detail": reason}
    if job.budget.left() <= 0:
        return job.budget.cut_row()
    try:
        row = run_measurement(function, dict(candidate_key=key, **kwargs), isolated=False)
    except Exception as error:  # recorded with the model and shape it happened at; the run goes on
        row = {
            "status": "error",
            "detail": f"{type(error).__name__}: {error}"[:500],
            "traceback": traceback.format_exc(),
        }
    finally:
        release_memory(job.device)
    if CANDIDATES[key].attn_implementation == "flex_attention":
        row["attention_dropout"] = 0.0
        if attention_blockbert._flex_unavailable:
            row["kernel_ran"] = "sdpa: flex_attention failed to compile"
    return row


def section_ratios(rows: dict) -> dict:
    """{model: {anchor: {"time_paired", "time_of_medians", "memory"}}} from the rows: time as the median over rounds
    of the per-round ratio (and the ratio of the medians), memory as the ratio of the peaks."""
    ratios = {}
    for key, row in rows.items():
        for anchor in ANCHORS:
            theirs = rows.get(anchor, {})
            entry = {}
            if row.get("times_s") and theirs.get("times_s"):
                entry["time_paired"] = median_paired_ratio(row["times_s"], theirs["times_s"])
                entry["time_of_medians"] = row["median_s"] / theirs["median_s"]
            if row.get("peak_bytes") and theirs.get("peak_bytes"):
                entry["memory"] = row["peak_bytes"] / theirs["peak_bytes"]
            if entry:
                ratios.setdefault(key, {})[anchor] = entry
    return ratios


def time_section(section: dict, build_runners, job: Job, timing_context) -> None:
    """Every model whose memory was measured, timed interleaved (`timing_pass`): two untimed rounds (compiling,
    warming caches), then as many rounds as the budget leaves, up to the scale's."""
    rows = section["rows"]
    keys = [key for key, row in rows.items() if row["status"] == "ok"]
    if not keys:
        return
    runners = None
    try:
        runners = build_runners([CANDIDATES[key] for key in keys])
        with timing_context():
            for run in runners.values():
                synchronized(run, job.device)()
            start = time.perf_counter()
            for run in runners.values():
                synchronized(run, job.device)()
            round_s = time.perf_counter() - start
            repeats = min(job.scale.repeats, int(job.budget.left() / round_s))
            if repeats < 3:
                for key in keys:
                    rows[key].update(status="timing cut", detail="the budget left no time for 3 rounds")
                job.budget.cut = True
                return
            timings = timing_pass(runners, repeats, 0, job.device)
        section["repeats"] = repeats
        for key, timing in timings.items():
            timing.pop("ratios", None)  # the section's ratios, below, cover both anchors and memory
            rows[key].update(timing, sequences_per_s=section["batch_size"] / timing["median_s"])
    except (RuntimeError, MemoryError) as error:  # one process holds every model: keep the memory figures
        for key in keys:
            rows[key].update(status="timing failed", detail=f"{type(error).__name__}: {error}"[:300])
        section["timing_traceback"] = traceback.format_exc()
    finally:
        runners = None
        release_memory(job.device)


def training_autocast(key: str) -> str | None:
    return None if key in FP32_TRAINING else PRECISION


def build_training_runners(candidates, **shape) -> dict:
    """`train_step.py`'s runners, each model under its own precision (`FP32_TRAINING`)."""
    runners = {}
    for autocast in (PRECISION, None):
        group = [candidate for candidate in candidates if training_autocast(candidate.key) == autocast]
        if group:
            runners.update(
                training_runners(group, attention_dropout=ATTENTION_DROPOUT, autocast_dtype=autocast, **shape)
            )
    return runners


def comparison_part(record: dict, job: Job, training: bool) -> None:
    """Part 1 (training step) or 2 (inference): per grid point, each model's memory, then all of them timed."""
    size, device = job.scale.size, job.device
    grid = job.scale.train_grid if training else job.scale.inference_grid
    record["sections"] = []
    for batch_size, seq_len, nominal in grid:
        section = dict(name=f"{batch_size} x {seq_len}", batch_size=batch_size, seq_len=seq_len, rows={})
        section["nominal_seq_len"] = nominal
        record["sections"].append(section)
        shape = dict(batch_size=batch_size, seq_len=seq_len, size=size, device=device)
        for key in models_at(nominal):
            if training:
                kwargs = dict(shape, attention_dropout=ATTENTION_DROPOUT, autocast_dtype=training_autocast(key))
                section["rows"][key] = measure_row(measure_training_step, kwargs, key, job)
                if key in FP32_TRAINING:
                    section["rows"][key]["precision"] = FP32_TRAINING[key]
            else:
                section["rows"][key] = measure_row(measure_forward, dict(shape, dtype=PRECISION), key, job)
            job.save()
        if training:
            time_section(section, functools.partial(build_training_runners, **shape), job, contextlib.nullcontext)
        else:
            time_section(
                section, functools.partial(inference_runners, dtype=PRECISION, **shape), job, torch.inference_mode
            )
        section["ratios"] = section_ratios(section["rows"])
        job.save()


def max_batch_part(record: dict, job: Job) -> None:
    """Part 3: at the nominal N = 1024 of the training grid, each model's largest batch (`search_largest_batch`),
    starting from what its part-1 memory predicts; each model gets an equal share of the time left."""
    measured_batch, seq_len, nominal = next(point for point in job.scale.train_grid if point[2] == 1024)
    trained = next(
        (s for s in job.results["parts"].get("train", {}).get("sections", []) if s["seq_len"] == seq_len), None
    )
    record.update(seq_len=seq_len, limit=job.scale.max_batch_limit, rows={})
    keys = models_at(nominal)
    for index, key in enumerate(keys):
        reason = not_run_here(key, job.device)
        if reason or job.budget.left() <= 0:
            record["rows"][key] = {"status": "not run", "detail": reason} if reason else job.budget.cut_row()
            job.save()
            continue
        share = Budget(job.budget.left() / (len(keys) - index))
        probe = None
        try:
            autocast = training_autocast(key)
            probe = TrainingStepProbe(key, seq_len, job.scale.size, ATTENTION_DROPOUT, job.device, autocast)
            measured = trained["rows"].get(key) if trained else None
            guess = probe.first_guess(measured, measured_batch, job.scale.max_batch_limit)
            row = search_largest_batch(
                probe, guess, job.scale.max_batch_limit, functools.partial(least_left, share, job.budget)
            )
            row["first_guess"] = guess
            if key in FP32_TRAINING:
                row["precision"] = FP32_TRAINING[key]
            job.budget.cut |= row["status"] == "cut"
        except Exception as error:
            row = {
                "status": "error",
                "detail": f"{type(error).__name__}: {error}"[:500],
                "traceback": traceback.format_exc(),
            }
        finally:
            probe = None
            release_memory(job.device)
        record["rows"][key] = row
        job.save()
    for row in record["rows"].values():
        for anchor in ANCHORS:
            theirs = record["rows"].get(anchor, {}).get("largest_fitting")
            if row.get("largest_fitting") and theirs:
                row.setdefault("ratios", {})[anchor] = row["largest_fitting"] / theirs


def long_document_part(record: dict, job: Job) -> None:
    """Part 4: `long_document_cost.py` on the whole-article set, on this device in bf16, within the part's budget."""
    options = job.options
    if not options.long_document_data:
        record["detail"] = "not run: give --long_document_data and --long_document_source"
        return
    with tempfile.TemporaryDirectory() as folder:
        output = Path(folder) / "long_document_cost.json"
        argv = [
            "--data_dir", options.long_document_data, "--sets", "article", "--source_model",
            options.long_document_source, "--max_questions", str(job.scale.long_document_questions), "--device",
            job.device, "--dtype", PRECISION, "--time_budget_s", f"{max(1.0, 0.7 * job.budget.left()):.0f}",
            "--output", str(output),
        ]  # fmt: skip
        try:
            long_document_cost.main(argv)
        except SystemExit as refusal:  # its own checks of the inputs (the reason is on stderr)
            raise RuntimeError(f"long_document_cost.py refused its arguments (exit status {refusal.code})") from None
        record["result"] = json.loads(output.read_text())


# --- the results files ------------------------------------------------------------------------------------------------


def _number(value, digits: int = 3) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def _note(row: dict) -> str:
    parts = (
        []
        if row.get("status") in ("ok", None)
        else [row["status"] + (f": {row['detail']}" if row.get("detail") else "")]
    )
    if row.get("attention_used") == "original_full":
        parts.append("BigBird ran full attention (input too short for block sparse)")
    if "attention_dropout" in row:
        parts.append(f"attention dropout {row['attention_dropout']:g}")
    if row.get("kernel_ran"):
        parts.append(row["kernel_ran"])
    if row.get("precision"):
        parts.append(row["precision"])
    return "; ".join(parts)


def comparison_markdown(section: dict) -> str:
    headers = ["model", "peak memory (GiB)", "median (ms)", "sequences/s"]
    headers += [f"time / {CANDIDATES[a].label}" for a in ANCHORS] + [f"memory / {CANDIDATES[a].label}" for a in ANCHORS]
    table = []
    for key, row in section["rows"].items():
        ratios = section.get("ratios", {}).get(key, {})
        median = row.get("median_s")
        cells = [CANDIDATES[key].label, _number(row.get("peak_bytes") and row["peak_bytes"] / GIB)]
        cells += [_number(median and 1000 * median, 1), _number(row.get("sequences_per_s"), 1)]
        cells += [_number(ratios.get(a, {}).get("time_paired")) for a in ANCHORS]
        cells += [_number(ratios.get(a, {}).get("memory")) for a in ANCHORS]
        table.append([*cells, _note(row)])
    return markdown_table([*headers, "note"], table)


def paper_markdown(results: dict) -> str:
    """BlockBERT's same-run ratios to both RoBERTa rows, beside the paper's figure where it gives one."""
    headers = ["measure, batch x N", "model"]
    headers += [f"time / {CANDIDATES[a].label}" for a in ANCHORS] + [f"memory / {CANDIDATES[a].label}" for a in ANCHORS]
    headers += ["paper (/ RoBERTa)", "measured / RoBERTa eager against the paper"]
    table = []
    for part, measure in (("train", "training step"), ("inference", "inference")):
        for section in results["parts"].get(part, {}).get("sections", []):
            for key in SUMMARY_MODELS:
                ratios = section.get("ratios", {}).get(key)
                if not ratios:
                    continue
                cells = [f"{measure}, {section['name']}", CANDIDATES[key].label]
                cells += [_number(ratios.get(a, {}).get("time_paired")) for a in ANCHORS]
                cells += [_number(ratios.get(a, {}).get("memory")) for a in ANCHORS]
                paper, against = [], []
                for (p, n, k, kind), (figure, where) in PAPER_RATIOS.items():
                    if (p, n, k) != (part, section["nominal_seq_len"], key):
                        continue
                    paper.append(f"{kind} {figure} ({where})")
                    measured = ratios.get("roberta-eager", {}).get("time_paired" if kind == "time" else "memory")
                    if results["settings"]["scale"] != FULL.name:
                        against.append("tiny sizes: not comparable")
                    elif measured is not None:
                        against.append(f"{kind} {'lower' if measured <= figure else 'HIGHER'} ({measured:.2f})")
                table.append([*cells, "; ".join(paper) or "-", "; ".join(against) or "-"])
    return markdown_table(headers, table)


def max_batch_markdown(record: dict) -> str:
    headers = ["model", "largest batch that fits", "smallest that does not"]
    headers += [f"/ {CANDIDATES[a].label}" for a in ANCHORS] + ["probes", "note"]
    table = []
    for key, row in record.get("rows", {}).items():
        ratios = row.get("ratios", {})
        cells = [CANDIDATES[key].label, row.get("largest_fitting", ""), row.get("smallest_failing") or ""]
        cells += [_number(ratios.get(a), 2) for a in ANCHORS] + [len(row.get("probes", []))]
        note = row.get("detail") or (f"searched from {row['first_guess']}" if "first_guess" in row else "")
        table.append([*cells, "; ".join(x for x in (row.get("status", ""), note, row.get("precision")) if x)])
    return markdown_table(headers, table)


def render_markdown(results: dict) -> str:
    settings = results["settings"]
    lines = [
        "# Efficiency on a GPU: BlockBERT against RoBERTa (eager and sdpa), flex_attention, Longformer and BigBird",
        "",
        f"Produced by `{results['command']}` on {results['started_utc']} UTC.",
        "",
        f"Machine: {results['machine']}.",
        "",
        f"- {settings['scale']} dims: {settings['size']}; random weights and tokens, no padding.",
        "- Training step: one AdamW step of `*ForMaskedLM` (15% of positions labelled) under bf16 autocast (fp32 "
        f"weights and AdamW state), attention dropout {settings['attention_dropout']:g} (flex_attention: 0, "
        "transformers runs it without), hidden dropout 0.1. Peak memory = weights + AdamW state + the step's peak "
        "above them, after a warm-up step. Inference: `*Model` forward with bf16 weights; peak memory above the "
        "weights.",
        "- Time: medians of the rounds of each section (models interleaved, two untimed rounds first); ratios are "
        "same-run, the median over rounds of the per-round ratio. Memory: one model at a time in one process, "
        + (
            f"torch.cuda.max_memory_allocated (allocator setting: {settings['allocator'] or 'default'})."
            if settings["device"] == "cuda"
            else "torch.profiler's allocation events."
        ),
        f"- {other_families_note(ModelSize() if settings['scale'] == 'BERT-base' else ModelSize.tiny())}",
        "",
        "## BlockBERT beside the paper",
        "",
        paper_markdown(results),
        "## Parts",
        "",
    ]
    part_rows = [
        [
            name,
            record["status"],
            _number(record.get("budget_s"), 0),
            _number(record.get("elapsed_s"), 1),
            record.get("detail", ""),
        ]
        for name, record in results["parts"].items()
    ]
    lines += [markdown_table(["part", "status", "budget (s)", "used (s)", "detail"], part_rows)]
    titles = {"train": "Training step", "inference": "Inference (bf16)"}
    for part, title in titles.items():
        for section in results["parts"].get(part, {}).get("sections", []):
            repeats = f", {section['repeats']} rounds" if section.get("repeats") else ""
            lines += [f"## {title}, {section['name']}{repeats}", "", comparison_markdown(section)]
    max_batch = results["parts"].get("max_batch", {})
    if max_batch.get("rows"):
        lines += [
            f"## Largest batch of N = {max_batch['seq_len']} whose training step fits",
            "",
            max_batch_markdown(max_batch),
        ]
    long_document = results["parts"].get("long_document", {}).get("result")
    if long_document:
        lines += [
            "## Seconds per question over whole articles",
            "",
            long_document_cost.render_markdown(long_document).split("\n", 2)[2],
        ]
    return "\n".join(lines)


def write_results(output_dir: Path, results: dict) -> None:
    write_file_atomically(output_dir / f"{STEM}.json", json.dumps(results, indent=2, default=str))
    write_file_atomically(output_dir / f"{STEM}.md", render_markdown(results))


# --- the run ----------------------------------------------------------------------------------------------------------


def versions() -> dict:
    cuda = torch.cuda.is_available()
    return dict(
        python=platform.python_version(),
        torch=torch.__version__,
        transformers=transformers.__version__,
        cuda=torch.version.cuda,
        gpu=torch.cuda.get_device_name() if cuda else None,
        gpu_memory_gib=round(torch.cuda.get_device_properties(0).total_memory / GIB, 1) if cuda else None,
    )


def parse_budgets(text: str) -> dict[str, float]:
    budgets = dict(BUDGETS_S)
    for item in filter(None, (item.strip() for item in text.split(","))):
        name, _, seconds = item.partition("=")
        if name not in PARTS:
            raise ValueError(f"--budgets names an unknown part {name!r}: choose among {', '.join(PARTS)}.")
        try:
            budgets[name] = float(seconds)
        except ValueError:
            raise ValueError(f"--budgets item {item!r} is not PART=SECONDS (e.g. train=120).") from None
        if budgets[name] < 0:
            raise ValueError(f"--budgets {name} must be at least 0 seconds, got {seconds}.")
    return budgets


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cpu", "cuda"])
    parser.add_argument("--tiny", action="store_true", help="tiny sizes and rounds: checks the script, in seconds")
    parser.add_argument("--parts", default=",".join(PARTS), help="comma-separated, in the order they run")
    parser.add_argument(
        "--budgets",
        default="",
        help="PART=SECONDS,... (default: " + ", ".join(f"{k} {v:g}" for k, v in BUDGETS_S.items()) + ")",
    )
    parser.add_argument(
        "--output_dir",
        help=f"folder for {STEM}.json and .md (default: {DEFAULT_OUTPUT_DIR}; with --tiny a new temporary folder)",
    )
    parser.add_argument("--long_document_data", help="folder with article.json (experiments/build_long_context_qa.py)")
    parser.add_argument("--long_document_source", help="the source model's folder (config and tokenizer suffice)")
    parser.add_argument("--render", metavar="JSON", help="only rewrite the .md beside a results .json")
    return parser


def parse_args(argv):
    """The options, checked before any work (errors through the parser: exit status 2 with the reason)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.render:
        if not Path(args.render).is_file():
            parser.error(f"--render: {args.render} is not a file.")
        return args
    args.parts = [part for part in args.parts.split(",") if part]
    unknown = [part for part in args.parts if part not in PARTS]
    if unknown or not args.parts:
        parser.error(f"--parts: unknown part(s) {unknown or args.parts}; choose among {', '.join(PARTS)}.")
    try:
        args.budgets = parse_budgets(args.budgets)
    except ValueError as error:
        parser.error(str(error))
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda was asked for but torch sees no CUDA device: use --device cpu (with --tiny).")
    if bool(args.long_document_data) != bool(args.long_document_source):
        parser.error("--long_document_data and --long_document_source go together: give both, or neither.")
    if args.long_document_data and not (Path(args.long_document_data) / "article.json").is_file():
        parser.error(f"--long_document_data {args.long_document_data} has no article.json: build it with "
                     "experiments/build_long_context_qa.py --sets article.")  # fmt: skip
    if args.long_document_source and not (Path(args.long_document_source) / "config.json").is_file():
        parser.error(f"--long_document_source {args.long_document_source} has no config.json.")
    return args


PART_FUNCTIONS = {
    "train": functools.partial(comparison_part, training=True),
    "inference": functools.partial(comparison_part, training=False),
    "max_batch": max_batch_part,
    "long_document": long_document_part,
}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.render:
        path = Path(args.render)
        write_file_atomically(path.with_suffix(".md"), render_markdown(json.loads(path.read_text())))
        print(f"wrote {path.with_suffix('.md')}")
        return 0
    scale = TINY if args.tiny else FULL
    output_dir = Path(
        args.output_dir or (tempfile.mkdtemp(prefix="blockbert-gpu-efficiency-") if args.tiny else DEFAULT_OUTPUT_DIR)
    )
    output_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    # flex_attention compiles once per new shape (head groups, batch, N, training or not): more than dynamo's default
    # limit of 8, past which it would run uncompiled (named cache_size_limit before torch 2.7).
    dynamo_config = torch._dynamo.config
    setattr(dynamo_config, "recompile_limit" if hasattr(dynamo_config, "recompile_limit") else "cache_size_limit", 64)
    results = dict(
        command=recorded_command(["python", "benchmarks/gpu_efficiency.py", *argv]),
        started_utc=f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M}",
        machine=machine_description(),
        versions=versions(),
        settings=dict(
            scale=scale.name,
            size=scale.size.describe(),
            device=args.device,
            precision=PRECISION,
            attention_dropout=ATTENTION_DROPOUT,
            train_grid=scale.train_grid,
            inference_grid=scale.inference_grid,
            repeats=scale.repeats,
            max_batch_limit=scale.max_batch_limit,
            allocator=os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
        ),
        parts={name: dict(status="not started", budget_s=args.budgets[name]) for name in args.parts},
    )

    def save():
        write_results(output_dir, results)

    save()
    for name in args.parts:
        record, budget = results["parts"][name], Budget(args.budgets[name])
        record.update(status="running", machine=machine_description())
        job = Job(scale, args.device, budget, save, args, results)
        try:
            PART_FUNCTIONS[name](record, job)
            record["status"] = (
                "cut" if budget.cut else ("not run" if record.get("detail", "").startswith("not run") else "done")
            )
        except KeyboardInterrupt:  # `timeout --signal=INT`: keep what was measured
            record["status"] = "interrupted"
            record["elapsed_s"] = round(budget.used(), 1)
            save()
            print(f"interrupted during {name}; wrote {output_dir}/{STEM}.{{json,md}}", file=sys.stderr)
            return 130
        except Exception as error:
            record.update(
                status="error", detail=f"{type(error).__name__}: {error}"[:500], traceback=traceback.format_exc()
            )
            print(record["traceback"], file=sys.stderr)
        finally:
            record["elapsed_s"] = round(budget.used(), 1)
            release_memory(args.device)
            save()
    print(render_markdown(results))
    print(f"wrote {output_dir}/{STEM}.{{json,md}}")
    failed = [name for name, record in results["parts"].items() if record["status"] == "error"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
