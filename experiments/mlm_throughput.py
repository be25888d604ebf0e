"""The training speed of one `examples/run_mlm.py` run, from its own record: tokens per second over its logged steps
(the first ones left out: warm-up), with the machine, the run's settings and the command that ran it. Sizes the
adaptation runs (`experiments/adaptation.py`) from a measurement rather than an estimate.

    accelerate launch --cpu examples/run_mlm.py --output_dir outputs/throughput ... --logging_steps 1 \\
        --stop_after_step 60
    python experiments/mlm_throughput.py --run_dir outputs/throughput --output results/adaptation/cpu_throughput.json \\
        --command "accelerate launch --cpu examples/run_mlm.py ..." --corpus_tokens 2019235

Exit status: 0 written; 2 bad options or a run without logged steps, refused before writing anything.
Logic in `blockbert_experiments.training_speed`.
"""

import json
import sys
from dataclasses import dataclass, field

from transformers import HfArgumentParser

from blockbert_experiments.training_speed import run_speed
from blockbert_hf.training import HelpFormatter


@dataclass
class ThroughputArguments:
    run_dir: str = field(metadata={"help": "output folder of a run_mlm.py run logged with --logging_steps 1"})
    output: str = field(metadata={"help": "JSON file to write"})
    command: str = field(metadata={"help": "the command line that ran it, recorded as given"})
    warmup_steps: int = field(default=1, metadata={"help": "first logged steps left out of the speed"})
    corpus_tokens: int | None = field(default=None, metadata={"help": "also give the hours per epoch of this many"})
    conditions: str = field(default="", metadata={"help": "what else ran on the machine meanwhile (recorded as given)"})


def main(argv=None) -> int:
    parser = HfArgumentParser(ThroughputArguments, description=__doc__, formatter_class=HelpFormatter)
    (args,) = parser.parse_args_into_dataclasses(args=argv)
    try:
        result = run_speed(args.run_dir, args.warmup_steps, args.corpus_tokens)
    except (FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    result.update(command=args.command, conditions=args.conditions)
    with open(args.output, "w") as file:
        json.dump(result, file, indent=2)
        file.write("\n")
    print(f"{result['tokens_per_second']:.0f} tokens/s; written: {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
