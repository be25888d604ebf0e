"""Brings trained models back from a machine whose files do not outlive it (a lent GPU), in parts small enough to
travel, and rebuilds them on the next machine from the checkpoint they were trained from.

    python experiments/weight_parts.py export --model_dir RUN/final_model --base_dir CONVERTED --output_dir $OUT \\
        --name n512_n2_10-2
    python experiments/weight_parts.py restore --manifest PARTS/n512_n2_10-2.parts.json --base_dir CONVERTED \\
        --output_dir RUN/final_model

`export` writes NAME.part-KK.safetensors (the tensors that differ from the checkpoint's, in bf16, at most
--max_part_bytes each) and NAME.parts.json; `restore` refuses a checkpoint other than the one the parts apply to (make
it again with the same converter command: the conversion is deterministic) and a missing or altered part.

Exit status: 0 done; 2 bad input, refused before writing anything.
Logic in `blockbert_experiments.weight_parts`.
"""

import argparse
import sys
from dataclasses import dataclass, field

from transformers import HfArgumentParser

from blockbert_experiments.weight_parts import DEFAULT_PART_BYTES, export_parts, restore_parts
from blockbert_hf.train.runs import HelpFormatter


@dataclass
class ExportArguments:
    model_dir: str = field(metadata={"help": "the trained model's folder (model.safetensors, config.json)"})
    base_dir: str = field(metadata={"help": "the checkpoint it was trained from (e.g. the converted model)"})
    output_dir: str = field(metadata={"help": "where the parts and the manifest go"})
    name: str = field(metadata={"help": "the parts' file name prefix"})
    max_part_bytes: int = field(default=DEFAULT_PART_BYTES, metadata={"help": "largest part, in bytes"})


@dataclass
class RestoreArguments:
    manifest: str = field(metadata={"help": "NAME.parts.json, with its parts beside it"})
    base_dir: str = field(metadata={"help": "the checkpoint the parts apply to"})
    output_dir: str = field(metadata={"help": "the model folder to write"})


COMMANDS = {"export": ExportArguments, "restore": RestoreArguments}


def build_parser() -> argparse.ArgumentParser:
    # argparse for the two subcommands (HfArgumentParser has none), each parsed by HfArgumentParser.
    parser = argparse.ArgumentParser(prog="weight_parts.py", description=__doc__, formatter_class=HelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=HfArgumentParser)
    for command, arguments in COMMANDS.items():
        commands.add_parser(command, dataclass_types=arguments, formatter_class=HelpFormatter)
    return parser


def main(argv=None) -> int:
    options = vars(build_parser().parse_args(argv))
    command = options.pop("command")
    try:
        if command == "export":
            written = export_parts(**vars(ExportArguments(**options)))
        else:
            written = restore_parts(**vars(RestoreArguments(**options)))
    except (FileNotFoundError, ValueError) as error:
        print(f"weight_parts.py: {error}", file=sys.stderr)
        return 2
    print(f"written: {written}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
