"""One moto server (real HTTP, real AWS protocols) for the devstack tests; boto3 is never patched."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from devstack.aws import client, start_moto_server

REGION = "us-east-1"


@pytest.fixture(scope="package")
def endpoint() -> Iterator[str]:
    server, url = start_moto_server()
    yield url
    server.stop()


@pytest.fixture(scope="package")
def sqs(endpoint: str) -> Any:
    return client("sqs", endpoint, REGION)
