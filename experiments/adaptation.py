"""The adaptation chain: continued masked-LM training of a converted encoder with each attention pattern.

Options: `--help`; the code and its documentation: `blockbert_experiments.adaptation`.
"""

import sys

from blockbert_experiments.adaptation import build_parser, main  # noqa: F401


if __name__ == "__main__":
    sys.exit(main())
