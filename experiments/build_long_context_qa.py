"""Builds long-context QA sets from a SQuAD-format file: each question's answer paragraph filled with neighbouring
paragraphs of its article up to T tokens (training, dev and test sets; docs/qa_long_context_data.md).

    python experiments/build_long_context_qa.py --squad_file path/to/dev-v1.1.json.gz \\
        --tokenizer TOKENIZER_FOLDER --output_dir outputs/long_qa_data

Writes OUTPUT_DIR/<set>.json (SQuAD format, for examples/run_qa.py), manifest.json, stats.json and stats.md.
"""

import logging
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from blockbert_experiments import option


os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported: everything read is local

from transformers import AutoTokenizer, HfArgumentParser  # noqa: E402

from blockbert_experiments.long_context import LongContextConfig, build_long_context_sets, stats_table  # noqa: E402
from blockbert_hf.saving import check_output_keeps_inputs  # noqa: E402
from blockbert_hf.train.runs import HelpFormatter  # noqa: E402


@dataclass
class BuildArguments:
    squad_file: str = field(
        metadata={"help": "SQuAD-format .json(.gz), e.g. SQuAD v1.1 dev (CC BY-SA 4.0): path/to/dev-v1.1.json.gz"}
    )
    tokenizer: str = field(metadata={"help": "Tokenizer folder of the model: lengths are counted in its tokens."})
    output_dir: str = field(metadata={"help": "Folder to write the sets into (written atomically)."})
    overwrite_output_dir: bool = option(False, "Replace an existing output folder.")


def build_parser() -> HfArgumentParser:
    return HfArgumentParser((BuildArguments, LongContextConfig), description=__doc__, formatter_class=HelpFormatter)


def check_arguments(arguments: BuildArguments) -> None:
    """The tokenizer and output folders, checked before any work (the SQuAD file is checked where it is read)."""
    if not Path(arguments.tokenizer).is_dir():
        raise ValueError(
            f"--tokenizer {arguments.tokenizer} does not exist or is not a folder: pass the model's tokenizer folder "
            "(e.g. $MINILM, the installed all-MiniLM-L6-v2)."
        )
    output_dir = Path(arguments.output_dir)
    if output_dir.exists() and not output_dir.is_dir():
        raise ValueError(f"--output_dir {output_dir} is a file: pass a folder to write the sets into.")
    if output_dir.exists() and not arguments.overwrite_output_dir:
        raise ValueError(
            f"{output_dir} already exists: choose another --output_dir or pass --overwrite_output_dir to replace it."
        )
    inputs = {"--squad_file": arguments.squad_file, "--tokenizer": arguments.tokenizer}
    check_output_keeps_inputs(output_dir, inputs, output_name="--output_dir")


def _first_line(error: Exception) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


def main(argv=None) -> int:
    # A bad option, input or data stops the build before it writes: one line saying what to do, exit 2, no traceback.
    try:
        arguments, config = build_parser().parse_args_into_dataclasses(args=argv)  # LongContextConfig checks its own
        check_arguments(arguments)
        logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
        try:
            tokenizer = AutoTokenizer.from_pretrained(arguments.tokenizer)
        except (OSError, ValueError) as error:
            message = f"--tokenizer {arguments.tokenizer} holds no tokenizer that loads ({_first_line(error)})."
            raise ValueError(message) from None
        started = time.perf_counter()
        built = build_long_context_sets(
            arguments.squad_file, arguments.output_dir, tokenizer, config, overwrite=arguments.overwrite_output_dir
        )
    except (OSError, ValueError) as error:
        print(f"build_long_context_qa.py: error: {_first_line(error)}", file=sys.stderr)
        raise SystemExit(2) from None
    elapsed = time.perf_counter() - started
    logging.info(f"Wrote {len(built.manifest['sets'])} sets to {built.output_dir} in {elapsed:.1f} s")
    print(stats_table(built.stats))
    return 0


if __name__ == "__main__":
    sys.exit(main())
