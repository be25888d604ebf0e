"""Write Hub model cards from what this repository measured.

Options: `--help`; the code and its documentation: `blockbert_experiments.model_cards`.
"""

import os
import sys


os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported: everything read is local

from blockbert_experiments.model_cards import build_parser, main  # noqa: E402, F401


if __name__ == "__main__":
    sys.exit(main())
