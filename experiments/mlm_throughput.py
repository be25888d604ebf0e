"""The training speed of one examples/run_mlm.py run, from its own record.

Options: `--help`; the code and its documentation: `blockbert_experiments.training_speed`.
"""

import sys

from blockbert_experiments.training_speed import build_parser, main  # noqa: F401


if __name__ == "__main__":
    sys.exit(main())
