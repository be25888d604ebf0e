"""Build long-context QA sets from a SQuAD-format file: training sets with contexts filled to N tokens (first half of
the articles) and test sets (second half): `paragraph`, a length sweep on the same questions, and whole articles.

    python experiments/build_long_context_qa.py --squad_file path/to/dev-v1.1.json.gz \\
        --tokenizer TOKENIZER_FOLDER --output_dir outputs/long_qa_data

The committed sets come from SQuAD v1.1 dev (dev-v1.1.json.gz, CC BY-SA 4.0; the repository ships two of its articles
in data/samples/squad_v1.1_dev_sample.json).

Writes OUTPUT_DIR/<set>.json (SQuAD format, for examples/run_qa.py --train_file/--validation_file), manifest.json,
stats.json and stats.md (context token lengths under the tokenizer). See docs/qa_long_context_data.md.
"""

import logging
import os
import time
from dataclasses import dataclass, field


os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported: the tokenizer is a local folder

from transformers import AutoTokenizer, HfArgumentParser  # noqa: E402

from blockbert_experiments.long_context import LongContextConfig, build_long_context_sets, stats_table  # noqa: E402
from blockbert_hf.training import HelpFormatter  # noqa: E402


@dataclass
class BuildArguments:
    squad_file: str = field(
        metadata={"help": "SQuAD-format .json(.gz), e.g. SQuAD v1.1 dev (CC BY-SA 4.0): path/to/dev-v1.1.json.gz"}
    )
    tokenizer: str = field(metadata={"help": "Tokenizer folder of the model: lengths are counted in its tokens."})
    output_dir: str = field(metadata={"help": "Folder to write the sets into (written atomically)."})
    overwrite_output_dir: bool = field(default=False, metadata={"help": "Replace an existing output folder."})


def build_parser() -> HfArgumentParser:
    return HfArgumentParser((BuildArguments, LongContextConfig), description=__doc__, formatter_class=HelpFormatter)


def main(argv=None) -> None:
    arguments, config = build_parser().parse_args_into_dataclasses(args=argv)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    tokenizer = AutoTokenizer.from_pretrained(arguments.tokenizer)
    started = time.perf_counter()
    built = build_long_context_sets(
        arguments.squad_file, arguments.output_dir, tokenizer, config, overwrite=arguments.overwrite_output_dir
    )
    elapsed = time.perf_counter() - started
    logging.info(f"Wrote {len(built.manifest['sets'])} sets to {built.output_dir} in {elapsed:.1f} s")
    print(stats_table(built.stats))


if __name__ == "__main__":
    main()
