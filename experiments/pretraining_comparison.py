"""The pre-training comparison: full attention against BlockBERT n = 2 and n = 3 at an equal token budget.

Options: `--help`; the code and its documentation: `blockbert_experiments.pretraining_comparison`.
"""

import sys

from blockbert_experiments.pretraining_comparison import build_parser, main  # noqa: F401


if __name__ == "__main__":
    sys.exit(main())
