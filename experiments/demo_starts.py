"""Which model `make demo` starts from: the converted all-MiniLM-L6-v2, or the self-distilled BlockBERT checkpoint.

    python experiments/distilled_checkpoint.py outputs/minilm-n512-distilled
    python experiments/demo.py --output_dir outputs/demo_starts/converted_seed0 --seed 0            # and seed 1
    python experiments/demo.py --output_dir outputs/demo_starts/distilled_seed0 --seed 0 \\
        --source_model outputs/minilm-n512-distilled                                                   # and seed 1
    python experiments/demo_starts.py --converted outputs/demo_starts/converted_seed* \\
        --distilled outputs/demo_starts/distilled_seed* --output_dir results/demo/starts

Times the checkpoint's build (`distilled_checkpoint.py`, into a scratch folder), applies `RULE`, fixed before the demo
runs, to the runs' `results.json` files, and writes `results.json` and `README.md` to --output_dir.

Exit status: 0 written; 2 bad input (a run folder without a demo's results.json, runs of different machines or
options other than the seed and the source), refused before --output_dir is written.
"""

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import distilled_checkpoint

from blockbert_benchmarks.measuring.machine import recorded_command
from blockbert_experiments.demo import RESULTS_KIND
from blockbert_experiments.minilm import installed_minilm
from blockbert_hf.saving import write_file_atomically, write_json_atomically


MAX_ADDED_SECONDS = 120  # the most the distilled start may add to `make demo`
RULE = (
    "The demo starts from the self-distilled checkpoint by default only if its whole-article F1, mean over the "
    "seeds, exceeds the converted start's by more than the larger of the two starts' seed spreads (highest minus "
    f"lowest seed), and building the checkpoint adds at most {MAX_ADDED_SECONDS} s; otherwise it keeps the converted "
    "start."
)
VARYING = ("seed", "source_model", "output_dir")  # the options the compared runs may differ in


def read_runs(folders: list[Path]) -> list[dict]:
    """The demo results of `folders`; a `ValueError` naming a folder without them."""
    runs = []
    for folder in folders:
        path = folder / "results.json"
        results = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        if results.get("kind") != RESULTS_KIND:
            raise ValueError(f"{folder} holds no results.json of a finished demo: run experiments/demo.py there first.")
        runs.append(results)
    return runs


def start_summary(runs: list[dict]) -> dict:
    """Seeds, per-seed F1 over the whole article and over the own paragraph, their means and the seed spread."""
    whole = [run["held_out"]["whole_document"]["f1"] for run in runs]
    return {
        "seeds": [run["arguments"]["seed"] for run in runs],
        "questions": runs[0]["held_out"]["whole_document"]["questions"],
        "source_model": runs[0]["arguments"]["source_model"],
        "whole_article_f1": whole,
        "own_paragraph_f1": [run["held_out"]["own_paragraph"]["f1"] for run in runs],
        "mean_whole_article_f1": round(statistics.mean(whole), 2),
        "mean_own_paragraph_f1": round(statistics.mean(run["held_out"]["own_paragraph"]["f1"] for run in runs), 2),
        "seed_spread": round(max(whole) - min(whole), 2),
        "demo_minutes": [round(run["elapsed_seconds"] / 60, 1) for run in runs],
        "commands": [run["command"] for run in runs],
    }


def decide(converted: dict, distilled: dict, build_seconds: float) -> dict:
    """`RULE` applied to the two starts' summaries and the checkpoint's build time."""
    gain = round(distilled["mean_whole_article_f1"] - converted["mean_whole_article_f1"], 2)
    spread = max(converted["seed_spread"], distilled["seed_spread"])
    raises = gain > spread
    fast_enough = build_seconds <= MAX_ADDED_SECONDS
    return {"gain": gain, "larger_seed_spread": spread, "raises_f1": raises, "build_fast_enough": fast_enough,
            "start_from_distilled": raises and fast_enough}  # fmt: skip


def time_build(source_model: Path) -> float:
    """Wall seconds `distilled_checkpoint.py` takes to build the checkpoint (into a scratch folder)."""
    with tempfile.TemporaryDirectory() as scratch:
        started = time.perf_counter()
        distilled_checkpoint.build_checkpoint(
            Path(scratch) / "checkpoint", source_model, distilled_checkpoint.RESULTS_DIR
        )
        return round(time.perf_counter() - started, 1)


def report(results: dict) -> str:
    converted, distilled, decision = results["converted"], results["distilled"], results["decision"]
    rows = "\n".join(
        f"| {name} | {', '.join(map(str, start['seeds']))} | "
        f"{', '.join(f'{f1:.1f}' for f1 in start['whole_article_f1'])} | {start['mean_whole_article_f1']:.1f} | "
        f"{start['seed_spread']:.1f} | {start['mean_own_paragraph_f1']:.1f} |"
        for name, start in (("converted", converted), ("self-distilled checkpoint", distilled))
    )
    verdict = (
        "starts from the self-distilled checkpoint" if decision["start_from_distilled"] else "keeps the converted start"
    )
    return f"""# Which model `make demo` starts from

Written by `{results["command"]}` from the demo runs' `results.json` (everything else as `make demo` runs it), on
{results["machine"]}.

**Rule, fixed before the runs:** {RULE}

| start | seeds | whole-article F1 per seed | mean | seed spread | own-paragraph F1, mean |
|---|---|---|---|---|---|
{rows}

Distilled minus converted, whole article: {decision["gain"]:+.1f} F1 against a larger seed spread of
{decision["larger_seed_spread"]:.1f}; building the checkpoint took {results["build_seconds"]:.1f} s (limit
{MAX_ADDED_SECONDS} s). **The demo {verdict}.** Held out: the {converted["questions"]} questions of one article, so
these figures place the demo only; the distillation's measured effect is in
[Stage A](../../distillation/stage_a/README.md).
"""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--converted", type=Path, nargs="+", required=True, help="demo folders of the converted start")
    parser.add_argument("--distilled", type=Path, nargs="+", required=True, help="demo folders of the distilled start")
    parser.add_argument("--output_dir", type=Path, required=True)
    parser.add_argument("--source_model", type=Path, default=None, help="all-MiniLM-L6-v2 (default: installed)")
    args = parser.parse_args(argv)
    try:
        converted, distilled = read_runs(args.converted), read_runs(args.distilled)
        machines = {run["machine"] for run in converted + distilled}
        settings = {json.dumps({k: v for k, v in run["arguments"].items() if k not in VARYING}, sort_keys=True)
                    for run in converted + distilled}  # fmt: skip
        if len(machines) > 1 or len(settings) > 1:
            raise ValueError(
                "the runs differ in machine or in options other than the seed and the source: compare runs made alike."
            )
    except (OSError, ValueError) as error:
        print(f"demo_starts.py: error: {error}", file=sys.stderr)
        return 2
    build_seconds = time_build(args.source_model or installed_minilm())
    summaries = {"converted": start_summary(converted), "distilled": start_summary(distilled)}
    results = {
        "command": recorded_command(
            ["python", "experiments/demo_starts.py", *(sys.argv[1:] if argv is None else argv)]
        ),
        "machine": machines.pop(),
        "rule": RULE,
        **summaries,
        "build_seconds": build_seconds,
        "decision": decide(summaries["converted"], summaries["distilled"], build_seconds),
    }
    args.output_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomically(args.output_dir / "results.json", results)
    text = report(results)
    write_file_atomically(args.output_dir / "README.md", text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
