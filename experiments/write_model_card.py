"""Write Hub model cards (README.md with YAML metadata) from what this repository measured.

A fine-tuned model of the long-context QA comparison: its trained folder and the cell's results file.

    python experiments/write_model_card.py --name minilm-blockbert-n2-512-longqa \\
        --model_dir outputs/qa_comparison/cells/n512_n2_10-2_seed0/train/model \\
        --results_file results/qa_comparison/n512_n2_10-2_seed0/results.json

The model `make demo` fine-tuned: its folder and the demo's results file.

    python experiments/write_model_card.py --name blockbert-minilm-demo --model_dir outputs/demo/qa/model \\
        --demo_results outputs/demo/results.json

Recipe cards ("no weights published") of the paper's configurations (blockbert-base-n2, blockbert-base-n2-1024,
blockbert-base-n3, or all), with what this repository's QA comparison (results/qa_comparison/results.json) measured for
the nearest configuration without continued pre-training:

    python experiments/write_model_card.py --recipes all

Each card goes to OUTPUT_DIR/<name>/README.md (written atomically; a card there is regenerated). Every number in a
measured card is read from the results file, whose path the card records relative to the repository (a file
elsewhere: relative to the current folder, else by its name alone). Logic: blockbert_experiments.model_cards.
"""

import logging
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path


os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported: everything read here is local

from transformers import HfArgumentParser  # noqa: E402

from blockbert_experiments.model_cards import (  # noqa: E402
    PAPER_CONFIGURATIONS,
    demo_card,
    read_comparison_report,
    recipe_card,
    results_card,
    write_card,
)
from blockbert_hf.saving import OutputOverwritesInputError, check_output_keeps_inputs  # noqa: E402
from blockbert_hf.training import HelpFormatter  # noqa: E402


@dataclass
class CardArguments:
    recipes: list[str] = field(
        default_factory=list,
        metadata={"help": f"recipe cards of the paper's configurations: {', '.join(PAPER_CONFIGURATIONS)}, or all"},
    )
    model_dir: str | None = field(default=None, metadata={"help": "the trained model folder (its config.json)"})
    results_file: str | None = field(
        default=None, metadata={"help": "the cell's results.json, e.g. results/qa_comparison/<cell>/results.json"}
    )
    demo_results: str | None = field(
        default=None, metadata={"help": "the results.json `make demo` wrote (instead of --results_file)"}
    )
    name: str | None = field(default=None, metadata={"help": "the model's name: the card's folder under output_dir"})
    base_model: str | None = field(
        default=None, metadata={"help": "Hub id of the starting weights (known for all-MiniLM-L6-v2)"}
    )
    license: str | None = field(default=None, metadata={"help": "license of the weights (known for all-MiniLM-L6-v2)"})
    output_dir: str = field(default="model_cards", metadata={"help": "cards go to OUTPUT_DIR/<name>/README.md"})


def build_parser() -> HfArgumentParser:
    return HfArgumentParser(CardArguments, description=__doc__, formatter_class=HelpFormatter)


def output_problem(output_dir: Path, names: list[str]) -> str | None:
    """Why the cards cannot go to OUTPUT_DIR/<name>/README.md (a file in the way, a folder that cannot be written), or
    None."""
    if output_dir.exists() and not output_dir.is_dir():
        return f"--output_dir {output_dir} is a file: pass a folder for the cards (OUTPUT_DIR/<name>/README.md)."
    for name in names:
        target = output_dir / name
        if target.exists() and not target.is_dir():
            return f"{target} is a file, where the card's folder goes: remove it or pass another --output_dir."
    existing = output_dir
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if existing.exists() and not os.access(existing, os.W_OK | os.X_OK):
        return f"--output_dir {output_dir} cannot be written ({existing} is read-only): pass a writable folder."
    return None


def main(argv=None) -> int:
    parser = build_parser()
    (args,) = parser.parse_args_into_dataclasses(args=argv)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    measured = args.model_dir or args.results_file or args.demo_results or args.name
    if bool(args.recipes) == bool(measured):
        parser.error(
            "Pass either --recipes NAME... or --model_dir, --results_file (or --demo_results) and --name (one card), "
            "not both."
        )
    if args.recipes:
        names = list(PAPER_CONFIGURATIONS) if args.recipes == ["all"] else args.recipes
        unknown = [name for name in names if name not in PAPER_CONFIGURATIONS]
        if unknown:
            parser.error(f"Unknown recipe(s) {unknown}: choose among {', '.join(PAPER_CONFIGURATIONS)}, or all.")
        report = read_comparison_report(Path(__file__).resolve().parents[1])  # this repository's QA comparison
        cards = [(name, recipe_card(PAPER_CONFIGURATIONS[name], report)) for name in names]
    else:
        if args.results_file and args.demo_results:
            parser.error("Pass --results_file (a QA comparison cell) or --demo_results (make demo), not both.")
        if not (args.model_dir and (args.results_file or args.demo_results) and args.name):
            parser.error("A measured card needs all of --model_dir, --results_file (or --demo_results) and --name.")
        cards = [(args.name, None)]
    problem = output_problem(Path(args.output_dir), [name for name, _ in cards])
    if problem:
        parser.error(problem)
    inputs = {"--model_dir": args.model_dir, "--results_file": args.results_file, "--demo_results": args.demo_results}
    for name, _ in cards:
        try:
            check_output_keeps_inputs(Path(args.output_dir) / name / "README.md", inputs, output_name="the card")
        except OutputOverwritesInputError as error:
            parser.error(str(error))
    results_file = args.demo_results or args.results_file
    for name, card in cards:
        try:
            if card is None:
                make_card = demo_card if args.demo_results else results_card
                card = make_card(args.model_dir, results_file, name, base_model=args.base_model, license=args.license)
        except (FileNotFoundError, ValueError) as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        except (KeyError, TypeError, AttributeError) as error:  # a value of another type or shape than written
            print(
                f"error: {results_file} is malformed ({type(error).__name__}: {error}): pass the results file the "
                "experiment wrote.",
                file=sys.stderr,
            )
            return 2
        try:
            written = write_card(card, args.output_dir, name)
        except ValueError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        except OSError as error:  # e.g. a read-only folder or a full disk
            print(f"error: could not write the card to {Path(args.output_dir) / name}: {error}", file=sys.stderr)
            return 1
        logging.info(f"Wrote {written}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
