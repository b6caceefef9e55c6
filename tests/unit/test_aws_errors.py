"""ccm.errors is the one reader of an AWS error's code and message (the drivers import it as ccm.aws.errors)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from ccm.aws.errors import error_code, error_message, response_error_code

REPO = Path(__file__).resolve().parents[2]
HELPER = REPO / "layers/ccm/ccm/errors.py"  # a shared leaf: controllers read it too, without ccm.aws
# `["Error"]`, `.get("Error"`: reading botocore's error member by hand.
ERROR_MEMBER = re.compile(r"""\[\s*["']Error["']\s*\]|\.get\(\s*["']Error["']""")


@pytest.mark.parametrize(
    ("response", "code", "message"),
    [
        ({"Error": {"Code": "LoadBalancerNotFound", "Message": "gone"}}, "LoadBalancerNotFound", "gone"),
        ({"Error": {"Code": "Throttling"}}, "Throttling", ""),
        ({"Error": {}}, "", ""),
        ({}, "", ""),
    ],
)
def test_code_and_message(response: dict, code: str, message: str) -> None:
    err = ClientError(response, "Op")  # type: ignore[arg-type]
    assert (error_code(err), error_message(err), response_error_code(response)) == (code, message, code)


def test_no_other_module_reads_the_error_member() -> None:
    sources = [*(REPO / "layers/ccm/ccm").rglob("*.py"), *(REPO / "functions").rglob("*.py")]
    offenders = [
        f"{path.relative_to(REPO)}:{number}: {line.strip()}"
        for path in sources
        if path != HELPER
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if ERROR_MEMBER.search(line)
    ]
    assert HELPER in sources
    assert not offenders, "use ccm.errors:\n" + "\n".join(offenders)
