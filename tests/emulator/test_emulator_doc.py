"""docs/emulator.md names the test that pins each behaviour: every one it names must exist."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_test_named_in_the_emulator_doc_exists() -> None:
    doc = (ROOT / "docs" / "emulator.md").read_text()
    named = re.findall(r"`([\w/]+\.py)::(\w+)`", doc)
    assert len(named) >= 20
    for path, name in named:
        file = ROOT / path if "/" in path else ROOT / "tests" / "emulator" / path
        assert re.search(rf"^def {name}\(", file.read_text(), re.M), f"{path}::{name} named in docs/emulator.md"
