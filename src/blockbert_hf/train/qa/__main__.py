"""`python -m blockbert_hf.train.qa split-articles SRC OUT_DIR`: QA data helpers on the command line."""

import argparse
from collections.abc import Iterable

from .data import read_squad_json, split_squad_articles


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m blockbert_hf.train.qa", description="QA data helpers.")
    commands = parser.add_subparsers(dest="command", required=True)
    split = commands.add_parser(
        "split-articles", help="Write the first and second half of a SQuAD file's articles as two SQuAD files."
    )
    split.add_argument("source", help="SQuAD-format .json or .json.gz")
    split.add_argument("output_dir")
    return parser


def _main(argv: Iterable[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    first, second = split_squad_articles(args.source, args.output_dir)
    for path in (first, second):
        dataset = read_squad_json(path)
        print(f"{path}: {len(set(dataset['title']))} articles, {len(dataset)} questions")


if __name__ == "__main__":
    _main()
