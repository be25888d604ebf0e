"""The long-context QA fine-tuning comparison: one pretrained encoder (all-MiniLM-L6-v2) converted to full, sparse
fixed and blockwise attention at N = 512, 1024 and 2048, fine-tuned with one recipe and evaluated on the long-context
test sets (see results/qa_comparison/README.md).

    python experiments/qa_comparison.py run --dry_run     # the plan: what each cell still needs, time estimates
    python experiments/qa_comparison.py run --squad_file path/to/dev-v1.1.json.gz   # every cell, in priority order
    python experiments/qa_comparison.py run --cells n512_full_seed0 n512_n2_10-2_seed0
    python experiments/qa_comparison.py report            # table, plot, intervals from the cells finished so far
    python experiments/qa_comparison.py run --grid recipe --effective_batch_size 16 --mixed_precision bf16
                                                          # the learning-rate screening on the dev articles
    python experiments/qa_comparison.py run --grid objective --recipe_dir results/qa_recipe \
        --results_dir results/qa_recipe
                                                          # the long model's training objective, on the recipe
                                                          # chosen so far (window against per_block, dev articles)
    python experiments/qa_comparison.py run --recipe_dir results/qa_recipe --effective_batch_size 16
                                                          # the comparison on the recipe chosen there
    python experiments/qa_comparison.py run --grid distilled_table4 --distilled_dir outputs/distilled \
        --work_dir outputs/distillation_qa --results_dir results/distillation/stage_a --effective_batch_size 16 \
        --train_tokens_per_batch 8192 --window_scoring null_relative --cells n512_full_seed0
                                                          # a cell of the distillation comparison's Stage A (one
                                                          # CPU session each; results/distillation/stage_a)
    python experiments/qa_comparison.py run --recipe_dir results/qa_recipe --jobs 11
                                                          # every cell at once, one process each (a GPU machine)

`run` can be interrupted at any time and started again: converted models are cached, finished trainings and
evaluations are skipped, an interrupted training resumes from its last checkpoint (one about every
--checkpoint_minutes of training) and an interrupted evaluation redoes only its missing sets. Large files go to
--work_dir (default outputs/qa_comparison), results and the report to --results_dir (default results/qa_comparison).
Needs the sets of experiments/build_long_context_qa.py in --data_dir (default outputs/long_qa_data), built from SQuAD
v1.1 dev (dev-v1.1.json.gz, CC BY-SA 4.0); the cell trained on paragraphs also needs that file itself, --squad_file.
"""

import argparse
import logging
import sys

from transformers import HfArgumentParser

from blockbert_experiments.qa_comparison import (
    ComparisonConfig,
    apply_recipe_choice,
    format_plan,
    plan_comparison,
    run_comparison,
    write_grid_report,
)
from blockbert_hf.saving import OutputOverwritesInputError, check_output_keeps_inputs
from blockbert_hf.training import HelpFormatter


COMMANDS = ("run", "report")


def build_parser() -> argparse.ArgumentParser:
    """`qa_comparison.py {run,report} [options]`: both commands take the options of `ComparisonConfig`."""
    parser = argparse.ArgumentParser(prog="qa_comparison.py", description=__doc__, formatter_class=HelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=HfArgumentParser)
    for command in COMMANDS:
        commands.add_parser(
            command,
            dataclass_types=ComparisonConfig,
            prog=f"qa_comparison.py {command}",
            description=__doc__,
            formatter_class=HelpFormatter,
        )
    return parser


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] not in COMMANDS:
        print(f"usage: qa_comparison.py {{{','.join(COMMANDS)}}} [options] (--help for the options)\n\n{__doc__}")
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    options = vars(build_parser().parse_args(argv))
    command = options.pop("command")
    config = ComparisonConfig(**options)
    inputs = {"--data_dir": config.data_dir, "--squad_file": config.squad_file}
    try:
        for option in ("--work_dir", "--results_dir"):
            check_output_keeps_inputs(getattr(config, option[2:]), inputs, output_name=option)
        if config.recipe_dir is not None:
            config = apply_recipe_choice(config)
    except (OutputOverwritesInputError, ValueError) as error:
        print(f"qa_comparison.py: {error}", file=sys.stderr)
        return 2
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    if command == "report":
        report = write_grid_report(config)
        print(f"Report of {len(report['cells'])} cell(s) written to {config.results_dir}/README.md")
        return 0
    try:
        if config.dry_run:
            print(format_plan(config, plan_comparison(config)))
            return 0
        failed = run_comparison(config)
    except (FileNotFoundError, ValueError) as error:  # a missing or wrong input: its reason, not a traceback
        print(f"qa_comparison.py: {error}", file=sys.stderr)
        return 2
    if failed:
        print(f"Failed cells (see the log above): {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
