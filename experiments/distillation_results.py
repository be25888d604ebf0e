"""The held-out record of `examples/distill_blockbert.py` runs, and the recipe the selection rule picks among them.

    python experiments/distillation_results.py --runs outputs/distill-n512-lr1e-4-all outputs/distill-n512-lr3e-4-all \\
        --output results/distillation/recipe_n512 --select_at_step 150

Reads each run folder's `run_args.json`, `metrics.jsonl` and `results.json`; writes `OUTPUT.json` (every run's
settings, command, held-out curve and training loss, and the choice) and `OUTPUT.md` (their table). The rule
(results/distillation/README.md): the lowest held-out normalised MSE of the last layer at `--select_at_step`; runs
within `--tie` of the best count as tied, and the lowest learning rate among them is chosen.
"""

import argparse
import json
import shlex
import sys
from pathlib import Path

from blockbert_benchmarks.measuring.machine import machine_description, recorded_path
from blockbert_hf.saving import write_file_atomically, write_json_atomically


# The options that tell the runs apart, shown in the table.
VARIED = ("learning_rate", "layer_weights", "cosine_weight", "max_train_steps", "short_batch_every")


def read_run(folder: Path) -> dict:
    """A run's settings, command, held-out evaluations and training losses."""
    if not (folder / "results.json").is_file():
        raise FileNotFoundError(f"{folder} holds no results.json: the run has not finished (resume it with --resume).")
    run_args = json.loads((folder / "run_args.json").read_text())
    records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines() if line.strip()]
    evaluations = [record for record in records if "eval_loss" in record]
    training = [{"step": r["step"], "loss": r["loss"]} for r in records if "loss" in r and "eval_loss" not in r]
    last_layer = max(int(key.rsplit("_", 1)[1]) for key in evaluations[0] if key.startswith("eval_mse_layer_"))
    return {
        "run": folder.name,
        "settings": {name: run_args.get(name) for name in VARIED},
        "command": _command(run_args),
        "last_layer": last_layer,
        "evaluations": evaluations,
        "training_loss": training,
        "results": json.loads((folder / "results.json").read_text()),
    }


def _command(run_args: dict) -> str:
    """The distill_blockbert.py command line of the run's arguments (paths as results files record them)."""
    words = ["python", "examples/distill_blockbert.py"]
    for name, value in run_args.items():
        if name == "input_digests" or value is None or value is False:
            continue
        values = value if isinstance(value, list) else [value]
        values = [recorded_path(item) if name in ("output_dir", "model_name_or_path", "train_files",
                                                  "validation_files") else item for item in values]  # fmt: skip
        words += [f"--{name}"] + ([] if value is True else [str(item) for item in values])
    return shlex.join(words)


def select(runs: list[dict], step: int, tie: float) -> dict:
    """The rule: the lowest last-layer held-out normalised MSE at `step`; within `tie` of it, the lowest learning
    rate."""

    def score(run):
        at_step = [record for record in run["evaluations"] if record["step"] == step]
        if not at_step:
            raise ValueError(f"{run['run']} has no evaluation at step {step}.")
        return at_step[0][f"eval_mse_layer_{run['last_layer']}"]

    scores = {run["run"]: score(run) for run in runs}
    best = min(scores.values())
    tied = [run for run in runs if scores[run["run"]] <= best + tie]
    chosen = min(tied, key=lambda run: run["settings"]["learning_rate"])
    return {"step": step, "tie": tie, "scores": scores, "chosen": chosen["run"]}


def table(runs: list[dict], choice: dict) -> str:
    steps = sorted({record["step"] for run in runs for record in run["evaluations"]})
    header = ["run", *VARIED[:3], *(f"MSE last @ {step}" for step in steps), "cosine distance @ end", "chosen"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for run in runs:
        by_step = {record["step"]: record for record in run["evaluations"]}
        key = f"eval_mse_layer_{run['last_layer']}"
        mse = [f"{by_step[step][key]:.4f}" if step in by_step else "" for step in steps]
        cosine = f"{run['evaluations'][-1]['eval_cosine']:.4f}"
        cells = [run["run"], *(str(run["settings"][name]) for name in VARIED[:3]), *mse, cosine]
        cells.append("yes" if run["run"] == choice["chosen"] else "")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", nargs="+", required=True, help="distill_blockbert.py output folders")
    parser.add_argument("--output", required=True, help="OUTPUT.json and OUTPUT.md are written")
    parser.add_argument("--select_at_step", type=int, required=True)
    parser.add_argument("--tie", type=float, default=0.005)
    args = parser.parse_args(argv)
    try:
        runs = [read_run(Path(folder)) for folder in args.runs]
        choice = select(runs, args.select_at_step, args.tie)
    except (FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    command = "python experiments/distillation_results.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    record = {"machine": machine_description(), "command": command, "choice": choice, "runs": runs}
    output = Path(args.output)
    write_json_atomically(output.with_suffix(".json"), record)
    text = f"# Distillation runs\n\nMade by `{command}`.\n\n{table(runs, choice)}\n"
    write_file_atomically(output.with_suffix(".md"), text)
    print(f"chosen: {choice['chosen']}; written: {output}.json, {output}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
