"""What the example scripts share on their command line: option values that start with a minus sign, options that
were renamed (the old name still works, with a note naming the new one), and an error as the one line a refused run
prints (`error: ...`, exit status 2)."""

import argparse
import re
import sys
from collections.abc import Mapping, Sequence


def read_negative_values(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Lets a value that starts with a minus sign and a digit reach its option, to be checked there
    (`--heads -1:5`, `--learning_rate -1e-3`): argparse takes only plain numbers such as `-1` or `-0.5` for values,
    anything else for an unknown option ("expected one argument"). None of the scripts' options looks like a
    negative number, the one case where argparse must tell the two apart."""
    parser._negative_number_matcher = re.compile(r"^-\.?\d")
    return parser


def rename_options(argv: Sequence[str] | None, renamed: Mapping[str, str]) -> list[str]:
    """`argv` (default: the command line) with each old option name of `renamed` (old -> new) written as its new
    name, both as `--old VALUE` and `--old=VALUE`; prints one line to stderr for each old name used."""
    argv = list(sys.argv[1:] if argv is None else argv)
    used = []
    for index, word in enumerate(argv):
        name, equals, value = str(word).partition("=")
        if name in renamed:
            argv[index] = renamed[name] + equals + value
            used.append(name)
    for name in dict.fromkeys(used):
        print(f"note: {name} is now {renamed[name]}; the old name still works for now.", file=sys.stderr)
    return argv


def error_line(error: BaseException) -> str:
    """`error: MESSAGE` on one line (messages of other libraries may span several)."""
    return "error: " + " ".join(str(error).split())
