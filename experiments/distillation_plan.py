"""The plan of the distillation comparison on a 2-core CPU: every cell (a distillation run, a fine-tuning, its
evaluations) with the hours it takes, from speeds measured on this machine, cut into sessions of at most
`--session_hours`.

    python experiments/distillation_plan.py --converted_n512 outputs/minilm-n512 \\
        --converted_n1024 outputs/minilm-n1024 --output_dir results/distillation \\
        --distillation_speeds results/distillation/throughput_n512.json results/distillation/throughput_n1024.json

Measured here (fp32, all threads): the seconds of one fine-tuning step (forward, backward, AdamW) of the question-
answering model on `batch x N` windows, and of one inference batch, for full attention and n = 2 at N = 512 and
n = 2 at N = 1024; read from committed files: distillation tokens/s (`experiments/mlm_throughput.py` on a
`distill_blockbert.py` run), the steps per epoch and evaluation windows of the committed cells
(`results/qa_comparison/*/results.json`, H200 runs of the same training sets). Writes `qa_speeds.json` once (an
existing one is read, so the plan can be made again on a busy machine), `plan.json` and `plan.md`.
"""

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch

from blockbert_benchmarks.measuring.machine import machine_description
from blockbert_hf import BlockBertForQuestionAnswering
from blockbert_hf.saving import write_file_atomically, write_json_atomically


REPO_ROOT = Path(__file__).resolve().parents[1]
COMMITTED_CELLS = REPO_ROOT / "results" / "qa_comparison"
RECIPE = dict(attention_probs_dropout_prob=0.0, hidden_dropout_prob=0.1)  # the comparison's fine-tuning recipe
TRAIN_EPOCHS = 2
BATCH = 16


def step_seconds(folder: str, length: int, overrides: dict, steps: int = 3) -> dict[str, float]:
    """Median seconds of a fine-tuning step on `BATCH x length` real tokens and of an inference batch of the same."""
    model = BlockBertForQuestionAnswering.from_pretrained(folder, **RECIPE, **overrides)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-4)
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(5, model.config.vocab_size, (BATCH, length), generator=generator)
    positions = torch.randint(0, length, (BATCH,), generator=generator)
    model.train()
    times = []
    for _ in range(steps + 1):  # the first is a warm-up
        started = time.perf_counter()
        model(input_ids=input_ids, start_positions=positions, end_positions=positions).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        times.append(time.perf_counter() - started)
    model.eval()
    with torch.no_grad():
        inference = []
        for _ in range(steps + 1):
            started = time.perf_counter()
            model(input_ids=input_ids)
            inference.append(time.perf_counter() - started)
    return {"train_step": statistics.median(times[1:]), "inference_batch": statistics.median(inference[1:])}


def committed_cell(name: str) -> dict:
    return json.loads((COMMITTED_CELLS / name / "results.json").read_text())


def steps_per_epoch(name: str) -> int:
    """From a committed cell's training log: its last logged step (every 50) over its epochs, rounded up."""
    cell = committed_cell(name)
    last = cell["train"]["loss_curve"][-1]["step"]
    return math.ceil((last + 50) / cell["recipe"]["num_train_epochs"])


def eval_windows(name: str, sets: tuple[str, ...]) -> dict[str, int]:
    return {name_: committed_cell(name)["sets"][name_]["windows"] for name_ in sets}


def plan_cells(speeds: dict, distillation: dict, stage_b_questions_fraction: float) -> list[dict]:
    """The cells in the order they run, each with its hours (training and evaluation apart)."""
    hours = lambda seconds: round(seconds / 3600, 2)  # noqa: E731
    a_steps = TRAIN_EPOCHS * steps_per_epoch("n512_full_seed0")
    a_windows = sum(eval_windows("n512_full_seed0", ("paragraph", "window_512")).values())
    b_steps = math.ceil(steps_per_epoch("n1024_n2_10-2") * stage_b_questions_fraction)
    b_steps_sliding = math.ceil(steps_per_epoch("n512_full_article_seed0") * stage_b_questions_fraction)
    b_windows_blockbert = sum(eval_windows("n1024_n2_10-2", ("paragraph", "window_512", "article")).values())
    b_windows_sliding = sum(eval_windows("n512_full_article_seed0", ("paragraph", "window_512", "article")).values())

    def qa_cell(name, speed_key, steps, windows, seeds=1, **packing):
        speed = speeds[speed_key]
        return {
            "cell": name,
            **packing,
            "seeds": seeds,
            "train_steps": steps,
            "train_hours": hours(steps * speed["train_step"]),
            "eval_windows": windows,
            "eval_hours": hours(windows / BATCH * speed["inference_batch"]),
        }

    def distillation_cell(name, key, steps, tokens_per_step=2048):
        return {
            "cell": name,
            "seeds": 1,
            "train_steps": steps,
            "train_hours": hours(steps * tokens_per_step / distillation[key]),
            "eval_windows": 0,
            "eval_hours": 0.0,
        }

    return [
        distillation_cell(
            "distillation recipe at N = 512: 4 runs of 150 steps (lr, loss mix) on held-out text", "n512", 4 * 150
        ),
        distillation_cell("distillation at N = 512, chosen recipe", "n512", 1000),
        qa_cell("A (a) full attention, converted (the teacher)", "full_512", a_steps, a_windows),
        qa_cell("A (b) n = 2, converted", "n2_512", a_steps, a_windows),
        qa_cell("A (c) n = 2 from the distilled encoder", "n2_512", a_steps, a_windows),
        qa_cell("A (d) (c) + task distillation from (a)", "n2_512", a_steps, a_windows),
        qa_cell("A (e) (c) with the question prefixed to each block", "n2_512", a_steps, a_windows),
        qa_cell(
            "A (f) (b) with the question prefixed to each block (the control of (e))", "n2_512", a_steps, a_windows
        ),
        qa_cell("A second seed of (a)", "full_512", a_steps, a_windows),
        qa_cell("A second seed of the distilled arm (the best of (c), (d), (e))", "n2_512", a_steps, a_windows),
        # The teacher's weights do not outlive its session: its logits over BlockBERT's training blocks (two blocks a
        # window) are taken there, with its evaluation.
        qa_cell(
            "B sliding windows of 512, full attention, seed 0 (the teacher, with its logits)",
            "full_512",
            b_steps_sliding,
            b_windows_sliding + 2 * b_steps * BATCH,
            one_session=True,
        ),
        qa_cell(
            "B sliding windows of 512, full attention", "full_512", b_steps_sliding, b_windows_sliding, 2, first_seed=1
        ),
        qa_cell("B BlockBERT 10:2 distilled + task-distilled", "n2_1024", b_steps, b_windows_blockbert, 3),
        qa_cell("B 12:0 distilled + task-distilled (the lower bound)", "n2_1024", b_steps, b_windows_blockbert),
    ]


def sessions(cells: list[dict], session_hours: float) -> list[dict]:
    """Each seed's training (split into resumable parts where it exceeds a session) and its evaluation, packed into
    sessions in order: a cell's evaluation may share its training's last session where both fit (a `one_session`
    cell's must: both are one unit). `first_seed` numbers a cell's seeds from there."""
    units = []
    for cell in cells:
        first_seed = cell.get("first_seed", 0)
        for seed in range(first_seed, first_seed + cell["seeds"]):
            if cell.get("one_session"):
                units.append((f"{cell['cell']}, with its evaluation", cell["train_hours"] + cell["eval_hours"]))
                continue
            parts = max(1, math.ceil(cell["train_hours"] / session_hours))
            for part in range(parts):
                label = cell["cell"] + (f", seed {seed}" if cell["seeds"] > 1 or first_seed else "")
                label += f", training part {part + 1}/{parts}" if parts > 1 else ""
                units.append((label, cell["train_hours"] / parts))
            if cell["eval_hours"]:
                seed_label = f", seed {seed}" if cell["seeds"] > 1 or first_seed else ""
                units.append((f"{cell['cell']}{seed_label}, evaluation", cell["eval_hours"]))
    planned, current = [], {"units": [], "hours": 0.0}
    for label, unit_hours in units:
        if current["units"] and current["hours"] + unit_hours > session_hours:
            planned.append(current)
            current = {"units": [], "hours": 0.0}
        current["units"].append(label)
        current["hours"] = round(current["hours"] + unit_hours, 2)
    planned.append(current)
    return planned


def write_plan(plan: dict, output_dir: Path) -> None:
    rows = [
        "| cell | seeds | training steps | training h | evaluation windows | evaluation h |",
        "|---|---|---|---|---|---|",
    ]
    for cell in plan["cells"]:
        rows.append(
            f"| {cell['cell']} | {cell['seeds']} | {cell['train_steps']:,} | {cell['train_hours']:.2f} | "
            f"{cell['eval_windows']:,} | {cell['eval_hours']:.2f} |"
        )
    session_rows = ["| session | what runs | hours |", "|---|---|---|"]
    for number, session in enumerate(plan["sessions"], 1):
        session_rows.append(f"| {number} | {'; '.join(session['units'])} | {session['hours']:.2f} |")
    speeds = plan["speeds"]
    measured_by = ", which also measured the fine-tuning speeds"
    if plan["speeds_measured_by"] != plan["command"]:
        measured_by = f"; fine-tuning speeds measured by\n`{plan['speeds_measured_by']}`"
    text = f"""# The distillation comparison: cells and sessions

Machine: {plan["machine"]}. Made by `{plan["command"]}`{measured_by}.

Measured: a fine-tuning step of {BATCH} windows takes {speeds["full_512"]["train_step"]:.1f} s with full attention at
N = 512, {speeds["n2_512"]["train_step"]:.1f} s with n = 2 at N = 512 and {speeds["n2_1024"]["train_step"]:.1f} s
with n = 2 at N = 1024 (fp32, attention dropout 0 as the recipe, on windows filled to N: an upper bound where
training windows are shorter); distillation reads
{plan["distillation_tokens_per_second"]["n512"]:.0f} tokens/s at N = 512 and
{plan["distillation_tokens_per_second"]["n1024"]:.0f} at N = 1024 (the teacher's windows included). Training steps
per epoch and evaluation windows come from the committed H200 cells of the same sets; every cell fine-tunes
{TRAIN_EPOCHS} epochs at batch {BATCH} (Stage B: {plan["stage_b_questions_fraction"]:.0%} of the whole-article
training questions, 1 epoch), in fp32.

{chr(10).join(rows)}

Sessions of at most {plan["session_hours"]} hours, in order ({len(plan["sessions"])} sessions):

{chr(10).join(session_rows)}
"""
    write_file_atomically(output_dir / "plan.md", text)
    write_json_atomically(output_dir / "plan.json", plan)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--converted_n512", required=True, help="all-MiniLM-L6-v2 converted at N = 512, n = 2, 10:2")
    parser.add_argument("--converted_n1024", required=True, help="converted at N = 1024 with block-relative positions")
    parser.add_argument("--distillation_speeds", nargs=2, required=True, help="mlm_throughput.py files: N 512, 1024")
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--session_hours", type=float, default=2.25)
    parser.add_argument("--stage_b_questions_fraction", type=float, default=0.5)
    parser.add_argument(
        "--speeds",
        help="the fine-tuning speeds' file: read where it exists, else measured on this machine and written there "
        "(default OUTPUT_DIR/qa_speeds.json)",
    )
    args = parser.parse_args(argv)
    for path in (args.converted_n512, args.converted_n1024, *args.distillation_speeds):
        if not Path(path).exists():
            print(f"error: {path} does not exist.", file=sys.stderr)
            return 2
    command = "python experiments/distillation_plan.py " + " ".join(argv if argv is not None else sys.argv[1:])
    speeds_file = Path(args.speeds or Path(args.output_dir) / "qa_speeds.json")
    if not speeds_file.is_file():  # measured once, on an otherwise idle machine
        measured = {
            "full_512": step_seconds(args.converted_n512, 512, {"attention_pattern": "full"}),
            "n2_512": step_seconds(args.converted_n512, 512, {}),
            "n2_1024": step_seconds(args.converted_n1024, 1024, {}),
        }
        rounded = {key: {name: round(value, 3) for name, value in speed.items()} for key, speed in measured.items()}
        write_json_atomically(speeds_file, {"machine": machine_description(), "command": command, "speeds": rounded})
    recorded = json.loads(speeds_file.read_text())
    speeds, machine = recorded["speeds"], recorded["machine"]
    distillation = {
        key: json.loads(Path(path).read_text())["tokens_per_second"]
        for key, path in zip(("n512", "n1024"), args.distillation_speeds)
    }
    cells = plan_cells(speeds, distillation, args.stage_b_questions_fraction)
    plan = {
        "machine": machine,
        "command": command,
        "speeds_measured_by": recorded["command"],
        "session_hours": args.session_hours,
        "stage_b_questions_fraction": args.stage_b_questions_fraction,
        "speeds": speeds,
        "distillation_tokens_per_second": distillation,
        "cells": cells,
        "sessions": sessions(cells, args.session_hours),
    }
    Path(args.output_dir).mkdir(parents=True, exist_ok=True)
    write_plan(plan, Path(args.output_dir))
    print(f"{len(plan['sessions'])} sessions; written: {args.output_dir}/plan.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
