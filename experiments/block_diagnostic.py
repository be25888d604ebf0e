"""Does a blockwise masked LM read the block before? Its MLM loss on block 1 with the true and another block 0.

Options: `--help`; the code and its documentation: `blockbert_experiments.block_diagnostic`.
"""

import sys

from blockbert_experiments.block_diagnostic import build_parser, main  # noqa: F401


if __name__ == "__main__":
    sys.exit(main())
