"""Blockwise adaptation of a converted encoder: convert all-MiniLM-L6-v2 (or --source_model), train an MLM head alone
on its frozen encoder (the reference, "before" row), then continue masked-LM training from that head with each
attention pattern at its own N, and collect every run's loss curves.

    python experiments/adaptation_corpus.py --data_dir DATA --output_dir outputs/adaptation_corpus
    python experiments/adaptation.py --output_dir outputs/adaptation \\
        --train_files outputs/adaptation_corpus/train/*.jsonl.gz \\
        --validation_files outputs/adaptation_corpus/held_out/wikitext2_test.jsonl.gz \\
        --reference_tokens 2000000 --adaptation_tokens 5000000 --mixed_precision bf16

Runs, in order (`--runs` picks some): `reference` (the head alone, encoder and word embeddings frozen, no dropout),
then from its final model `full_n512` (full attention: the control, on the same tokens), `n512_n2_10-2`,
`n1024_n2_10-2` (2 blocks of 512, positions restarting in each block), `n512_n3_8-2-2` and `n1024_n2_9-3`. The
pattern runs keep the word embeddings and the decoder tied to them frozen unless --train_word_embeddings. Every run
evaluates its starting point (step 0) and --evaluations times on the held-out text, at its own N.

Each step is a command of its own (`accelerate launch examples/run_mlm.py ...`; --launcher), recorded in
OUTPUT_DIR/commands.jsonl with paths as $OUTPUT_DIR and $SOURCE_MODEL. A finished run is skipped and an interrupted
one resumes from its last checkpoint, so the command can simply be started again. To keep each command short (a lent
GPU's 10-minute limit), run one run at a time, `--runs NAME`, and slice a long one with `--stop_after_step K` (K a
checkpoint step; the next start resumes). --dry_run prints the commands of the steps left.
Results: OUTPUT_DIR/adaptation_results.json (each run's training and held-out loss curves, final held-out loss,
speed and commands) and adaptation_curves.png, rewritten after every start.

Exit status: 0 done (or stopped as asked); 1 a step failed; 2 bad options, refused before any work.
Logic in `blockbert_experiments.adaptation`.
"""

import json
import sys
from pathlib import Path

from transformers import HfArgumentParser

from blockbert_experiments.adaptation import (
    ADAPTATION_OUTPUTS,
    RESULTS_JSON,
    RUNS_DIR,
    AdaptationArguments,
    check_chain_folder,
    check_slicing,
    recorded_names,
    run_chain,
    write_results,
)
from blockbert_hf.training import HelpFormatter, OutputDirError, check_output_dir, claim_output_dir, run_arguments


def build_parser() -> HfArgumentParser:
    return HfArgumentParser(AdaptationArguments, description=__doc__, formatter_class=HelpFormatter)


def source_model(args: AdaptationArguments) -> Path:
    if args.source_model:
        return Path(args.source_model)
    from blockbert_experiments.minilm import installed_minilm

    return installed_minilm()


def prepare(args: AdaptationArguments) -> Path:
    """Checks the options, the inputs and the output folder before any work; returns the source model's folder."""
    check_slicing(args)
    missing = [path for path in [*args.train_files, *args.validation_files] if not Path(path).is_file()]
    if missing:
        raise FileNotFoundError(f"Data file(s) {', '.join(missing)} do not exist.")
    source = source_model(args)
    if not args.dry_run:
        check_chain_folder(args)
        run_args = run_arguments(args)
        inputs = {"--source_model": str(source)}
        check_output_dir(args.output_dir, run_args, ADAPTATION_OUTPUTS, inputs=inputs)
        claim_output_dir(None, args.output_dir, run_args, ADAPTATION_OUTPUTS)
    return source


def main(argv=None) -> int:
    try:
        (args,) = build_parser().parse_args_into_dataclasses(args=argv)
        source = prepare(args)
    except (ValueError, FileNotFoundError, OutputDirError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    states = run_chain(args, source)
    if not args.dry_run and (Path(args.output_dir) / RUNS_DIR).is_dir():
        results = write_results(args, recorded_names(args, source))
        summary = {name: run["held_out_loss"] for name, run in results["runs"].items()}
        print(json.dumps({"states": states, "held_out_loss": summary}))
        print(f"written: {Path(args.output_dir) / RESULTS_JSON}")
    return 1 if "failed" in states.values() else 0


if __name__ == "__main__":
    sys.exit(main())
