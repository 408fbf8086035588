"""The README stays a five-minute read, and every link in it and in docs/ resolves (measured results live in docs/)."""

from __future__ import annotations

import re

import pytest
from conftest import REPO

PAGES = [REPO / "README.md", *sorted(p for p in (REPO / "docs").rglob("*.md") if "report" not in p.parts)]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchor(heading: str) -> str:
    """GitHub's anchor of a markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_readme_is_short_and_keeps_the_two_commands():
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    assert "make demo" in text and "make test" in text


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(page):
    for target in LINK.findall(page.read_text()):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        assert file.exists(), f"{page.relative_to(REPO)}: {target}"
        if anchor:
            headings = re.findall(r"^#+ (.*)$", file.read_text(), re.M)
            assert anchor in {_anchor(h) for h in headings}, f"{page.relative_to(REPO)}: {target}"
