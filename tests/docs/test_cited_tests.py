"""Every test that README.md or a docs page cites as `tests/PATH.py::test_name` exists, so that a page cannot point
readers at a test that was renamed or removed."""

import re

import pytest
from page_checks import PAGES, REPO_ROOT


CITATION = re.compile(r"\b(tests/[\w/]+\.py)::(test_\w+)")


def missing_citations(text: str) -> list[str]:
    """The `tests/PATH.py::test_name` citations of `text` whose file or test function does not exist."""
    missing = []
    for path, name in CITATION.findall(text):
        source = REPO_ROOT / path
        if not source.is_file() or not re.search(rf"^def {name}\(", source.read_text(encoding="utf-8"), re.M):
            missing.append(f"{path}::{name}")
    return missing


@pytest.mark.parametrize("page", PAGES)
def test_every_test_a_page_cites_exists(page):
    missing = missing_citations((REPO_ROOT / page).read_text(encoding="utf-8"))
    assert not missing, f"{page} cites tests that do not exist: {missing}"


def test_a_missing_test_or_file_is_found():
    text = (
        "`tests/docs/test_cited_tests.py::test_a_missing_test_or_file_is_found`, "
        "`tests/docs/test_cited_tests.py::test_renamed`, `tests/nowhere.py::test_x`"
    )
    assert missing_citations(text) == ["tests/docs/test_cited_tests.py::test_renamed", "tests/nowhere.py::test_x"]
