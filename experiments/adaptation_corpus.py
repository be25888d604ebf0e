"""Writes the adaptation corpus: the training and held-out text of the adaptation chain, with its manifest.

Options: `--help`; the code and its documentation: `blockbert_experiments.adaptation_corpus`.
"""

import sys

from blockbert_experiments.adaptation_corpus import build_parser, main  # noqa: F401


if __name__ == "__main__":
    sys.exit(main())
