"""Draw BlockBERT's attention masks as PNG: one panel per shift, query position down, key position across.

    python experiments/plot_attention_masks.py

writes docs/figures/attention_mask_n2_10-2.png and docs/figures/attention_mask_n3_8-2-2.png (the paper's "10:2" and
"8:2:2" head splits over 24 tokens). The masks are read from what a tiny model attends (docs/attention.md gives the
rule). Logic: blockbert_experiments.visualization.
"""

import logging
import os
import sys
from dataclasses import dataclass, field


os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported: nothing here needs the Hub

from transformers import HfArgumentParser  # noqa: E402

from blockbert_experiments.visualization import save_attention_mask_figure  # noqa: E402
from blockbert_hf.training import HelpFormatter  # noqa: E402


@dataclass
class PlotArguments:
    heads_per_shift: list[str] = field(
        default_factory=lambda: ["10:2", "8:2:2"],
        metadata={"help": "one figure per head split, in the paper's notation (n = number of counts)"},
    )
    sequence_length: int = field(default=24, metadata={"help": "tokens shown (N of the tiny model drawn)"})
    output_dir: str = field(default="docs/figures", metadata={"help": "where the PNG files go"})


def build_parser() -> HfArgumentParser:
    return HfArgumentParser(PlotArguments, description=__doc__, formatter_class=HelpFormatter)


def main(argv=None) -> int:
    parser = build_parser()
    (args,) = parser.parse_args_into_dataclasses(args=argv)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    for heads_per_shift in args.heads_per_shift:
        try:
            path = save_attention_mask_figure(heads_per_shift, args.output_dir, args.sequence_length)
        except ValueError as error:
            parser.error(str(error))
        logging.info(f"Wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
