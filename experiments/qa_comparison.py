"""The long-context QA fine-tuning comparison: run its cells and write its report.

Options: `--help`; the code and its documentation: `blockbert_experiments.qa_comparison.runner`.
"""

import sys

from blockbert_experiments.qa_comparison.runner import build_parser, main  # noqa: F401


if __name__ == "__main__":
    sys.exit(main())
