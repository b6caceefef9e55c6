"""Every relative link of the README, the changelog and docs/ names a file that exists and, with an anchor, a
heading of that file (GitHub's anchors: lower case, punctuation dropped, spaces to hyphens)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.deploy.conftest import REPO

DOCS = [REPO / "README.md", REPO / "CHANGELOG.md", REPO / "watcher/README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    out = set()
    for heading in re.findall(r"^#{1,6} (.+)$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        out.add(slug)
    return out


def links(path: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return [m for m in LINK.findall(text) if not re.match(r"[a-z]+:", m)]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(doc: Path) -> None:
    broken = []
    for link in links(doc):
        target, _, anchor = link.partition("#")
        path = (doc.parent / target).resolve() if target else doc
        if not path.exists() or (anchor and path.suffix == ".md" and anchor not in anchors(path)):
            broken.append(link)
    assert not broken, broken


def test_the_readme_first_screen_has_the_two_commands_and_the_test_command() -> None:
    lines = (REPO / "README.md").read_text().splitlines()
    first = "\n".join(lines[:40])
    assert "sam deploy --config-env" in first and "scripts/install-watcher --stack " in first
    # Every script the first screen tells a user to run exists and is executable.
    named = set(re.findall(r"scripts/[a-z-]+", first))
    assert {"scripts/configure", "scripts/install-watcher", "scripts/doctor"} <= named
    assert all((REPO / script).is_file() and os.access(REPO / script, os.X_OK) for script in named), named
    steps = [line for line in lines[:40] if re.match(r"\d+\. ", line)]
    assert 1 <= len(steps) <= 5, steps
    assert "bash scripts/test.sh" in (REPO / "README.md").read_text()  # what .ci/run runs
    assert len(lines) < 120, "the long reference belongs in docs/reference.md"
