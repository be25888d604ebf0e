"""The training speed of one `examples/run_mlm.py` run, from its own record (`metrics.jsonl`, `run_args.json` in its
output folder): tokens per second over its logged steps (the first ones left out: warm-up), with the machine, the run's
settings and the command that ran it. Summarise on the machine that ran it: the machine recorded is the one
summarising. Sizes the adaptation runs (`experiments/adaptation.py`) from a measurement rather than an estimate.

    accelerate launch --cpu examples/run_mlm.py --output_dir outputs/throughput ... --logging_steps 1 \\
        --stop_after_step 60
    python experiments/mlm_throughput.py --run_dir outputs/throughput --output results/adaptation/cpu_throughput.json \\
        --command "accelerate launch --cpu examples/run_mlm.py ..." --corpus_tokens 2019235

Exit status: 0 written; 2 bad options or a run without logged steps, refused before writing anything.
"""

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from transformers import HfArgumentParser

from blockbert_benchmarks.measuring.machine import machine_description, recorded_path
from blockbert_experiments import option
from blockbert_hf.train.runs import HelpFormatter, read_metrics


# The settings that decide a step's cost, copied from the run's record.
SPEED_SETTINGS = (
    "model_name_or_path", "attention_pattern", "num_blocks", "heads_per_shift", "max_seq_length", "tokens_per_batch",
    "per_device_train_batch_size", "freeze_word_embeddings", "train_only_mlm_head", "mixed_precision",
    "attn_implementation",
)  # fmt: skip


def run_speed(run_dir: str | Path, warmup_steps: int = 1, corpus_tokens: int | None = None) -> dict:
    """Real (unpadded) tokens per second of training over the logged steps after the first `warmup_steps`, from the
    cumulative `real_tokens_seen` and `train_seconds` (so a step logged late is neither lost nor counted twice)."""
    metrics = Path(run_dir) / "metrics.jsonl"
    if not metrics.is_file():
        raise FileNotFoundError(f"{metrics} does not exist: give the output folder of a run_mlm.py run.")
    steps = [row for row in read_metrics(metrics) if "tokens_per_second" in row]
    if len(steps) <= warmup_steps:
        raise ValueError(
            f"{run_dir} logged {len(steps)} training step(s), not more than the {warmup_steps} warm-up step(s) left "
            "out: run longer, with --logging_steps 1."
        )
    first, last = steps[warmup_steps - 1] if warmup_steps else None, steps[-1]
    tokens = last["real_tokens_seen"] - (first["real_tokens_seen"] if first else 0)
    seconds = last["train_seconds"] - (first["train_seconds"] if first else 0.0)
    run_args = json.loads((Path(run_dir) / "run_args.json").read_text())
    if run_args.get("model_name_or_path"):
        run_args["model_name_or_path"] = recorded_path(run_args["model_name_or_path"])
    result = {
        "machine": machine_description(),
        "settings": {name: run_args.get(name) for name in SPEED_SETTINGS},
        "steps_measured": f"{steps[warmup_steps]['step']}-{last['step']}",
        "real_tokens": tokens,
        "train_seconds": round(seconds, 1),
        "tokens_per_second": round(tokens / seconds, 1),
        "tokens_per_second_by_step": {row["step"]: round(row["tokens_per_second"], 1) for row in steps},
    }
    if corpus_tokens:
        hours = round(corpus_tokens * seconds / tokens / 3600, 2)
        result["hours_per_epoch"] = {"train_tokens": corpus_tokens, "hours": hours}
    return result


@dataclass
class ThroughputArguments:
    run_dir: str = field(metadata={"help": "output folder of a run_mlm.py run logged with --logging_steps 1"})
    output: str = field(metadata={"help": "JSON file to write"})
    command: str = field(metadata={"help": "the command line that ran it, recorded as given"})
    warmup_steps: int = option(1, "first logged steps left out of the speed")
    corpus_tokens: int | None = option(None, "also give the hours per epoch of this many")
    conditions: str = option("", "what else ran on the machine meanwhile (recorded as given)")


def build_parser() -> HfArgumentParser:
    return HfArgumentParser(ThroughputArguments, description=__doc__, formatter_class=HelpFormatter)


def main(argv=None) -> int:
    (args,) = build_parser().parse_args_into_dataclasses(args=argv)
    try:
        result = run_speed(args.run_dir, args.warmup_steps, args.corpus_tokens)
    except (FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    result.update(command=args.command, conditions=args.conditions)
    Path(args.output).write_text(json.dumps(result, indent=2) + "\n")
    print(f"{result['tokens_per_second']:.0f} tokens/s; written: {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
