"""Every link from README.md and the docs pages to a file of the repository leads to one that exists."""

import re
from pathlib import Path

import pytest
from page_checks import PAGES, REPO_ROOT


# [text](target) and ![alt](target), the target without a title; web links and in-page anchors are left out.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def missing_targets(page: Path) -> list[str]:
    """The link targets of `page` that are files of the repository (by their path from the page) and do not exist."""
    targets = [match.group(1).split("#", 1)[0] for match in LINK.finditer(page.read_text(encoding="utf-8"))]
    local = [target for target in targets if target and ":" not in target]
    return [target for target in local if not (page.parent / target).exists()]


@pytest.mark.parametrize("page", PAGES)
def test_links_to_repository_files_exist(page):
    missing = missing_targets(REPO_ROOT / page)
    assert not missing, f"{page} links to files that do not exist: {missing}"


def test_a_link_to_a_missing_file_is_found(tmp_path):
    (tmp_path / "here.md").write_text("x")
    page = tmp_path / "page.md"
    page.write_text("[a](here.md) ![b](gone.png) [c](here.md#part) [d](https://example.org/x.md) [e](#anchor)")
    assert missing_targets(page) == ["gone.png"]
