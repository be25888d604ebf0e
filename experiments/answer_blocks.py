"""Where each question's answer starts in its question-first window, for the Stage A report's split by block.

Options: `--help`; the code and its documentation: `blockbert_experiments.qa_comparison.answer_blocks`.
"""

import sys

from blockbert_experiments.qa_comparison.answer_blocks import main


if __name__ == "__main__":
    sys.exit(main())
