"""Build long-context QA sets from a SQuAD-format file (training, dev and test sets, contexts filled to T tokens).

Options: `--help`; the code and its documentation: `blockbert_experiments.long_context`.
"""

import os
import sys


os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported: everything read is local

from blockbert_experiments.long_context import build_parser, main  # noqa: E402, F401


if __name__ == "__main__":
    sys.exit(main())
