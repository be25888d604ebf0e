"""make demo: long-document question answering with BlockBERT, from real pretrained weights, on a CPU. Options:
`--help`; the code and its documentation: `blockbert_experiments.demo`."""

import os
import sys


os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported: everything read is local

from blockbert_experiments.demo import build_parser, main  # noqa: E402, F401


if __name__ == "__main__":
    sys.exit(main())
