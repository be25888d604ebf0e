"""The helpers that several experiments share (not part of the installed `blockbert_hf` package); a script whose logic
nothing else imports keeps it in `experiments/SCRIPT.py` itself. `python experiments/SCRIPT.py` puts `experiments/` on
`sys.path`, the tests find it through pytest's `pythonpath`; `experiments/blockbert_benchmarks` links to `benchmarks/`'s
package (peak memory, timing, the machine's record)."""

import importlib.util
from collections.abc import Sequence
from dataclasses import field
from pathlib import Path


EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples"


def option(default, help_text: str):
    """An `HfArgumentParser` dataclass option: its default (a list: a copy per instance) and its `--help` text."""
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata={"help": help_text})
    return field(default=default, metadata={"help": help_text})


def run_example_in_process(script: str, args: Sequence[str]) -> int:
    """Calls the `main` of `examples/<script>` in this process (how the tests run a step); returns its exit status."""
    path = EXAMPLES_DIR / script
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: run the experiment from a checkout of the repository.")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    try:
        return module.main(list(args)) or 0
    except SystemExit as error:
        return error.code if isinstance(error.code, int) else 1
